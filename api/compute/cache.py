"""Answers for inputs the server has seen: the text graph's output row per input, kept in
one least-recently-used cache bounded in bytes.

A row is stored under the loaded model (its serial, new at every load: a model deleted,
converted again and loaded under the same name never meets the old one's rows), the
prompt put before the input, and the input itself (a text, or a cross-encoder's pair).
What is kept is the graph's output before normalization and precision, which are applied
to every answer as before; so two requests that differ only in those share rows, and no
request can get another model's or another prompt's vector. Everything here runs on the
event loop: no locks.
"""

from __future__ import annotations

import sys
import time
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from .requests.results import Embeddings, stack_rows

# What a stored row costs besides its vector and text: the key tuple, the entry, the
# dictionary's slot (measured with tracemalloc on CPython 3.11: about 300 bytes).
ENTRY_OVERHEAD_BYTES = 320


@dataclass(frozen=True)
class CachedRow:
    vector: np.ndarray
    token_count: int
    truncated: bool
    size: int


@dataclass(frozen=True)
class CacheStats:
    max_bytes: int
    bytes: int
    entries: int
    hits: int
    misses: int
    evictions: int


def _text_bytes(value: Hashable) -> int:
    if isinstance(value, tuple):
        return sum(_text_bytes(part) for part in value)
    return sys.getsizeof(value)


class ResponseCache:
    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._rows: OrderedDict[tuple[int, str, Hashable], CachedRow] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def lookup(self, serial: int, prefix: str, inputs: Sequence[Hashable]) -> list[CachedRow | None]:
        """Each input's stored row (marked as just used), or None."""
        found: list[CachedRow | None] = []
        rows = self._rows
        for value in inputs:
            key = (serial, prefix, value)
            row = rows.get(key)
            if row is not None:
                rows.move_to_end(key)
            found.append(row)
        hits = sum(row is not None for row in found)
        self.hits += hits
        self.misses += len(found) - hits
        return found

    def store(
        self,
        serial: int,
        prefix: str,
        inputs: Sequence[Hashable],
        vectors: np.ndarray,
        token_counts: Sequence[int],
        truncated: Sequence[bool],
    ) -> None:
        """Keep each input's output row, then drop the least recently used rows past the bound."""
        for row, value in enumerate(inputs):
            key = (serial, prefix, value)
            if key in self._rows:
                continue
            vector = vectors[row].copy()  # not a view holding the whole batch's array
            size = vector.nbytes + _text_bytes(value) + ENTRY_OVERHEAD_BYTES
            if size > self.max_bytes:
                continue
            self._rows[key] = CachedRow(vector, int(token_counts[row]), bool(truncated[row]), size)
            self._bytes += size
        while self._bytes > self.max_bytes:
            _, dropped = self._rows.popitem(last=False)
            self._bytes -= dropped.size
            self.evictions += 1

    def stats(self) -> CacheStats:
        return CacheStats(self.max_bytes, self._bytes, len(self._rows), self.hits, self.misses, self.evictions)


def answer_from_cache(
    inputs: list[Hashable],
    found: list[CachedRow | None],
    missing: list[Hashable],
    computed: Embeddings | None,
    arrived: float,
) -> Embeddings:
    """A request's rows: the cache's where ``found`` has one, else the ``computed`` row of
    its input (``missing`` lists those inputs, each once, in ``computed``'s order)."""
    where = {value: row for row, value in enumerate(missing)}
    vectors, counts, truncated = [], [], []
    for value, row in zip(inputs, found):
        if row is not None:
            vectors.append(row.vector)
            counts.append(row.token_count)
            truncated.append(row.truncated)
        else:
            assert computed is not None
            index = where[value]
            vectors.append(computed.vectors[index])
            counts.append(computed.token_counts[index])
            truncated.append(bool(computed.truncated_rows[index]) if computed.truncated_rows else False)
    hits = sum(row is not None for row in found)
    if computed is None:
        timing = {"tokenize_ms": 0.0, "inference_ms": (time.perf_counter() - arrived) * 1000}
    else:
        timing = {
            "tokenize_ms": computed.tokenize_ms,
            "inference_ms": computed.inference_ms,
            "queue_ms": computed.queue_ms,
        }
    return Embeddings(stack_rows(vectors), counts, sum(truncated), truncated_rows=truncated, cached=hits, **timing)
