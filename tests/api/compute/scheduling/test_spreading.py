"""Cutting one request's texts into parts for idle instances, and joining the answers."""

import numpy as np
import pytest

from embedgate.api.compute.requests.results import Embeddings
from embedgate.api.compute.scheduling.spreading import cut, joined


@pytest.mark.parametrize("parts", [1, 2, 3, 5])
def test_parts_are_contiguous_runs_of_the_sorted_texts_covering_each_once(parts):
    texts = ["x" * n for n in (5, 40, 3, 17, 8, 25, 1, 12, 30, 9)]
    groups = cut(texts, parts, len)
    assert len(groups) == parts and all(groups)
    assert sorted(row for group in groups for row in group) == list(range(len(texts)))
    lengths = [len(texts[row]) for group in groups for row in group]
    assert lengths == sorted(lengths)


def test_parts_carry_about_equal_total_length():
    texts = ["x" * 10] * 30 + ["x" * 100] * 3
    groups = cut(texts, 2, len)
    totals = [sum(len(texts[row]) for row in group) for group in groups]
    assert totals == [300, 300]  # 30 short texts against the 3 long ones
    even = cut(["same"] * 32, 4, len)
    assert [len(group) for group in even] == [8, 8, 8, 8]


def test_no_part_is_empty_even_when_one_text_outweighs_the_rest():
    # The long text alone is past every share: each part still gets a text.
    assert cut(["x" * 1000, "a", "b", "c"], 3, len) == [[1, 2], [3], [0]]
    assert cut(["a", "b"], 5, len) == [[0], [1]]  # never more parts than texts


def test_joined_answers_are_in_request_order_with_the_slowest_parts_timing():
    groups = [[2, 0], [1, 3]]
    shares = [
        Embeddings(np.array([[2.0], [0.0]]), [12, 10], 1, 1.0, 5.0, 0.5, truncated_rows=[True, False]),
        Embeddings(np.array([[1.0], [3.0]]), [11, 13], 0, 2.0, 4.0, 0.1, truncated_rows=[False, False]),
    ]
    answer = joined(shares, groups)
    np.testing.assert_array_equal(answer.vectors[:, 0], [0.0, 1.0, 2.0, 3.0])
    assert answer.token_counts == [10, 11, 12, 13]
    assert answer.truncated_rows == [False, False, True, False] and answer.truncated == 1
    assert (answer.tokenize_ms, answer.inference_ms, answer.queue_ms) == (2.0, 5.0, 0.5)
