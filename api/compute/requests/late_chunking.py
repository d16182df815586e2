"""Late chunks: each text through the model once, each chunk pooled from its tokens' vectors
in the context of the whole text (the model's late-chunking graph,
``converters/kinds/dense/late.py``).

A text is tokenized with its prompt before it and the model's special tokens, in full. Its
own tokens (not the prompt's, not the special ones) are cut into chunks as plain chunks are
(``chunking.py``: ``max_tokens``, ``overlap``, ``boundary``), but a chunk is its tokens in
the text, never tokenized again: its ``tokens`` are those it pools. A text whose tokens fit
the model's max length is one row; a longer one is cut into windows of the most tokens that
fit beside the prompt's and the special tokens, each row those tokens (the prompt's, the
special ones) around a window of the text's. Windows start every half window (and one ends
at the text's end); each chunk is pooled from the window that holds it whole with the most
context on its poorer side, and a chunk that no such window holds gets a window centred on
it. A text of no tokens of its own is one chunk pooled over all its row's tokens (what
embedding it alone pools).

Each row goes to the graph with its chunks' marks (``contract/preprocess/late_chunks.py``).
The work runs in the tokenizer pool, off the event loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from embedgate.contract.preprocess.late_chunks import chunk_marks
from embedgate.contract.spec import ATTENTION_MASK, CHUNK_ENDED, CHUNK_STARTED, INPUT_IDS

from .chunking import Chunk, Chunking, check_fits, cut, too_many, worded


@dataclass(frozen=True)
class Row:
    """One run of the graph: token ids, and its chunks' token spans in them."""

    ids: list[int]
    spans: list[tuple[int, int]]


@dataclass(frozen=True)
class LateLayout:
    """A request's texts as rows of the graph: each text's chunks, the rows, and where each
    chunk's vector is (its row, its place among the row's chunks), in the chunks' order."""

    chunks: list[list[Chunk]]
    rows: list[Row]
    places: list[tuple[int, int]]

    @property
    def tokens(self) -> int:
        """The tokens the rows run: what the request is charged."""
        return sum(len(row.ids) for row in self.rows)

    def row_tokens(self) -> list[int]:
        """Each chunk's share of :attr:`tokens`: a row's, on its first chunk."""
        counts = [0] * len(self.places)
        seen: set[int] = set()
        for index, (row, _) in enumerate(self.places):
            if row not in seen:
                seen.add(row)
                counts[index] = len(self.rows[row].ids)
        return counts

    def gather(self, outputs: list[np.ndarray]) -> np.ndarray:
        """The chunks' vectors, in order, from each row's output ([chunks, dim], its own first)."""
        return np.stack([outputs[row][place] for row, place in self.places]).astype(np.float32, copy=False)


def batches(layout: LateLayout, max_rows: int) -> list[tuple[list[int], dict[str, np.ndarray]]]:
    """The layout's rows, shortest first, in calls of at most ``max_rows``: each call's rows
    (their indices) and its inputs."""
    order = sorted(range(len(layout.rows)), key=lambda row: len(layout.rows[row].ids))
    calls = [order[start : start + max_rows] for start in range(0, len(order), max_rows)]
    return [(call, tensors([layout.rows[row] for row in call])) for call in calls]


def tensors(rows: list[Row]) -> dict[str, np.ndarray]:
    """The graph's inputs for ``rows``, right-padded with 0 to the longest."""
    width = max(len(row.ids) for row in rows)
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros_like(ids)
    started = np.zeros_like(ids)
    ended = np.zeros_like(ids)
    for index, row in enumerate(rows):
        ids[index, : len(row.ids)] = row.ids
        mask[index, : len(row.ids)] = 1
        started[index], ended[index] = chunk_marks(width, row.spans)
    return {INPUT_IDS: ids, ATTENTION_MASK: mask, CHUNK_STARTED: started, CHUNK_ENDED: ended}


def late_layout(
    tokenizer, texts: list[str], chunking: Chunking, prefix: str, max_length: int, max_chunks: int
) -> LateLayout:
    """``texts`` (``tokenizer``: the route's ``TextTokenizer``; ``prefix``: the prompt) as
    the graph's rows; ``max_tokens`` past what fits the model, and more than ``max_chunks``
    chunks in all, refused as plain chunks are."""
    whole = tokenizer.whole()
    fits = check_fits(whole, chunking, prefix, max_length)
    strip = tokenizer.strip_whitespace
    chunks: list[list[Chunk]] = []
    rows: list[Row] = []
    places: list[tuple[int, int]] = []
    for text in texts:
        full = prefix + text
        lead = len(full) - len(full.lstrip()) if strip else 0
        encoding = whole.encode(full.strip() if strip else full, add_special_tokens=True)
        # The text's own tokens: not special, reaching past the prompt (a byte-level BPE's
        # first word takes the prompt's last space). Their characters in the text.
        own = [
            index for index, ((_, stop), special) in enumerate(zip(encoding.offsets, encoding.special_tokens_mask))
            if not special and stop + lead > len(prefix)
        ]
        ids = list(encoding.ids)
        if not own:
            places.append((len(rows), 0))
            rows.append(Row(ids, [(0, len(ids))]))
            chunks.append([Chunk(0, len(text), 0)])
            continue
        first, last = own[0], own[-1] + 1
        spans = [
            (max(0, start + lead - len(prefix)), stop + lead - len(prefix)) for start, stop in encoding.offsets[first:last]
        ]
        words = worded(spans, text)
        mine = too_many(cut(
            text, [spans[index] for index in words], chunking,
            lambda begin, end, part: words[end - 1] + 1 - words[begin] if end > begin else 0,
            max_chunks - len(places),
        ), max_chunks)
        token_spans = [(words[begin], words[end - 1] + 1) for begin, end, _ in mine]
        chunks.append([chunk for _, _, chunk in mine])
        head, body, tail = ids[:first], ids[first:last], ids[last:]
        capacity = min(fits, max_length - len(head) - len(tail))
        starts, owners = windows(len(body), capacity, token_spans)
        base = len(rows)
        held: list[list[tuple[int, int]]] = [[] for _ in starts]
        for (a, b), window in zip(token_spans, owners):
            places.append((base + window, len(held[window])))
            held[window].append((len(head) + a - starts[window], len(head) + b - starts[window]))
        rows.extend(Row(head + body[start : start + capacity] + tail, pooled) for start, pooled in zip(starts, held))
    return LateLayout(chunks, rows, places)


def windows(length: int, capacity: int, spans: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """Where the rows of a text of ``length`` tokens start (``capacity`` tokens each, the
    text's last row ending at its end), and which of them pools each chunk of ``spans``
    (in order, none longer than ``capacity``); one row where the text fits."""
    if length <= capacity:
        return [0], [0] * len(spans)
    step = max(1, capacity // 2)
    grid = sorted(set(range(0, length - capacity, step)) | {length - capacity})
    chosen = []
    for a, b in spans:
        holding = [start for start in grid if start <= a and b <= start + capacity]
        if holding:
            # The most context on the chunk's poorer side; the earlier window where it ties.
            chosen.append(max(holding, key=lambda start: (min(a - start, start + capacity - b), -start)))
        else:
            chosen.append(min(max(0, a - (capacity - (b - a)) // 2), length - capacity))
    starts = sorted(set(chosen))
    return starts, [starts.index(start) for start in chosen]
