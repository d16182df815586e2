"""Late chunks' rows (api/compute/requests/late_chunking.py): a text's own tokens cut as plain
chunks are, its prompt and special tokens around every row, windows of the max length for a
longer text (each chunk pooled where it has the most context), and the graph's inputs; with
MiniLM's tokenizer."""

from __future__ import annotations

import numpy as np
import pytest

from embedgate.api.compute.requests.chunking import Chunking, chunk_texts
from embedgate.api.compute.requests.late_chunking import late_layout, tensors, windows
from embedgate.api.errors import InvalidOption, TooManyInputs
from embedgate.contract.preprocess.text import TextTokenizer

CLS, SEP = 101, 102
TEXT = "The tower stands by the river. It is tall and old; people visit it every summer and stay."


@pytest.fixture(scope="module")
def tokenizer(minilm_path):
    return TextTokenizer(f"{minilm_path}/tokenizer.json", 32, strip_whitespace=True)


def test_a_text_that_fits_is_one_row_its_chunks_its_tokens_in_the_text(tokenizer):
    chunking = Chunking(6, 2, "whitespace", late=True)
    layout = late_layout(tokenizer, [TEXT], chunking, "query: ", 32, 100)
    (row,) = layout.rows
    whole = tokenizer.whole()
    assert row.ids == whole.encode("query: " + TEXT).ids and row.ids[:3] == [CLS, *whole.encode("query:", add_special_tokens=False).ids]
    # Cut as plain chunks are (no chunk's text is tokenized again here: the spans agree).
    plain = chunk_texts(tokenizer, [TEXT], Chunking(6, 2, "whitespace"), "query: ", 32, 100)
    assert [(c.start, c.end) for c in layout.chunks[0]] == [(c.start, c.end) for c in plain[0]]
    own = whole.encode(TEXT, add_special_tokens=False)
    for chunk, (start, stop) in zip(layout.chunks[0], row.spans):
        # Its tokens in the row (after [CLS] and the prompt's 2) are the text's tokens of its characters.
        inside = [i for i, (a, b) in enumerate(own.offsets) if chunk.start <= a and b <= chunk.end]
        assert (start - 3, stop - 3) == (inside[0], inside[-1] + 1) and chunk.tokens == stop - start <= 6
    assert layout.places == [(0, place) for place in range(len(row.spans))]
    assert layout.tokens == len(row.ids) and sum(layout.row_tokens()) == len(row.ids)


def test_a_longer_text_is_windows_of_the_max_length_each_chunk_where_it_has_most_context(tokenizer):
    long = " ".join([TEXT] * 4)
    layout = late_layout(tokenizer, [long, "short"], Chunking(8, 0, late=True), "", 32, 100)
    *long_rows, short_row = layout.rows
    assert len(long_rows) > 2 and all(len(row.ids) == 32 and row.ids[0] == CLS and row.ids[-1] == SEP for row in long_rows)
    own = tokenizer.whole().encode(long, add_special_tokens=False).ids
    for chunk, (row, place) in zip(layout.chunks[0], layout.places):
        start, stop = layout.rows[row].spans[place]
        window = layout.rows[row].ids[1:-1]
        # The chunk's tokens in its window are its tokens in the text.
        inside = [i for i in range(len(own) - (stop - start) + 1) if own[i : i + stop - start] == window[start - 1 : stop - 1]]
        assert inside and stop - start == chunk.tokens
    assert short_row.ids == [CLS, *tokenizer.whole().encode("short", add_special_tokens=False).ids, SEP]
    assert layout.places[-1] == (len(layout.rows) - 1, 0) and len(layout.chunks[1]) == 1


def test_windows_every_half_window_each_chunk_in_the_one_with_most_context():
    # 100 tokens in windows of 30: starts 0, 15, ..., 60 and 70 (the end).
    starts, owners = windows(100, 30, [(0, 10), (10, 20), (40, 50), (90, 100)])
    assert [starts[owner] for owner in owners] == [0, 0, 30, 70]
    # A chunk no grid window holds whole gets one centred on it.
    starts, owners = windows(100, 30, [(8, 33)])
    assert starts == [6] and owners == [0]
    assert windows(20, 30, [(0, 5), (3, 9)]) == ([0], [0, 0])


def test_an_empty_text_is_one_chunk_pooled_over_its_row(tokenizer):
    layout = late_layout(tokenizer, [""], Chunking(8, late=True), "", 32, 100)
    assert [row.ids for row in layout.rows] == [[CLS, SEP]] and layout.rows[0].spans == [(0, 2)]
    assert [(c.start, c.end, c.tokens) for c in layout.chunks[0]] == [(0, 0, 0)]


def test_the_graphs_inputs_mark_each_rows_chunks(tokenizer):
    layout = late_layout(tokenizer, [TEXT, "a b"], Chunking(5, 2, late=True), "", 32, 100)
    feeds = tensors(layout.rows)
    mask, started, ended = feeds["attention_mask"], feeds["chunk_started"], feeds["chunk_ended"]
    assert mask[1].sum() == len(layout.rows[1].ids) < mask.shape[1]
    # A token is in exactly its chunks' (a shorter row's padding, in none).
    for index, row in enumerate(layout.rows):
        for k, (start, stop) in enumerate(row.spans):
            member = (k < started[index]) & (k >= ended[index])
            assert np.flatnonzero(member).tolist() == list(range(start, stop))
    # Each chunk's vector from its row's output, in the chunks' order.
    outputs = [np.arange(len(row.spans) * 2, dtype=np.float32).reshape(-1, 2) + 100 * index
               for index, row in enumerate(layout.rows)]
    gathered = layout.gather(outputs)
    assert gathered.shape == (len(layout.places), 2) and gathered[-1].tolist() == outputs[-1][-1].tolist()


def test_the_bounds_are_those_of_plain_chunks(tokenizer):
    with pytest.raises(InvalidOption, match="holds at most 28 tokens"):
        late_layout(tokenizer, [TEXT], Chunking(29, late=True), "query: ", 32, 100)
    with pytest.raises(TooManyInputs, match="more than 3 chunks"):
        late_layout(tokenizer, [TEXT], Chunking(2, late=True), "", 32, 3)
