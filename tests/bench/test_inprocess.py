"""The in-process baselines' batching, with a recording stand-in for onnxruntime.

The real ONNX file is run by the integration test (tests/integration/test_benchmark.py).
"""

from pathlib import Path

import numpy as np
import pytest

from embedgate.bench.inprocess import (
    LocalModel,
    _gather,
    bracketed,
    open_local_model,
    padding_efficiency,
    plan_batches,
    run_baseline,
)
from embedgate.bench.payloads import SentencePayload


def test_plain_batches_keep_arrival_order_and_sorted_batches_group_lengths():
    counts = [5, 30, 8, 12, 30, 6, 9]
    plain = plan_batches(counts, 3, by_length=False)
    assert [list(b) for b in plain] == [[0, 1, 2], [3, 4, 5], [6]]
    ordered = plan_batches(counts, 3, by_length=True)
    assert [list(b) for b in ordered] == [[0, 5, 2], [6, 3, 1], [4]]
    # Plain computes 3*30 + 3*30 + 9 tokens for 100 real ones; sorted 3*8 + 3*30 + 30.
    assert padding_efficiency(counts, plain) == pytest.approx(100 / 189)
    assert padding_efficiency(counts, ordered) == pytest.approx(100 / 144)


def test_gathered_rows_are_exactly_the_tokenizer_rows(minilm_tokenizer):
    texts = SentencePayload(per_request=10, seed=2).inputs(0)
    chunks = [minilm_tokenizer.encode(texts[s : s + 4]) for s in range(0, 10, 4)]
    rows = np.array([9, 0, 5])
    input_ids, attention_mask = _gather(chunks, rows, 4)
    expected = minilm_tokenizer.encode([texts[9], texts[0], texts[5]])
    np.testing.assert_array_equal(input_ids, expected.input_ids)
    np.testing.assert_array_equal(attention_mask, expected.attention_mask)


class RecordingSession:
    def __init__(self):
        self.shapes = []
        self.rows = []

    def run(self, outputs, feeds):
        ids = feeds["input_ids"]
        self.shapes.append(ids.shape)
        self.rows.extend(int(n) for n in feeds["attention_mask"].sum(1))
        return [np.zeros((ids.shape[0], 4), dtype=np.float32)]


@pytest.mark.parametrize("strategy", ["plain", "length_sorted"])
def test_every_text_is_embedded_once_and_sorting_pads_less(minilm_tokenizer, strategy):
    texts = [t for i in range(5) for t in SentencePayload(per_request=20, seed=4).inputs(i)]
    session = RecordingSession()
    model = LocalModel(Path("model.onnx"), None, minilm_tokenizer, session, 0)
    result = run_baseline(model, texts, strategy, batch_size=32)
    assert result.texts == 100 and result.batches == 4 == len(session.shapes)
    assert sorted(session.rows) == sorted(minilm_tokenizer.encode(texts).token_counts)
    assert result.seconds >= result.tokenize_s + result.infer_s > 0
    computed = sum(rows * width for rows, width in session.shapes)
    assert result.padding_efficiency == pytest.approx(sum(session.rows) / computed)
    if strategy == "length_sorted":
        widths = [width for _, width in session.shapes]
        assert widths == sorted(widths)
        plain = run_baseline(model, texts, "plain", batch_size=32)
        assert result.padding_efficiency > plain.padding_efficiency


def test_a_model_missing_from_the_repository_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="org--absent"):
        open_local_model(tmp_path, "org/absent")


def test_a_bracketed_baseline_is_the_mean_of_the_runs_before_and_after():
    before = {"strategy": "plain", "texts": 10, "embeddings_per_s": 400.0, "padding_efficiency": 0.7}
    after = {"strategy": "plain", "texts": 12, "embeddings_per_s": 500.0, "padding_efficiency": 0.75}
    both = bracketed(before, after)
    assert both["embeddings_per_s"] == 450.0
    assert both["runs_embeddings_per_s"] == [400.0, 500.0]
    assert both["texts"] == 12 and both["padding_efficiency"] == 0.75  # the run on the server's own inputs
