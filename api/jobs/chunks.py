"""A batch cut into chunks: units of work a chunk runner leases, runs and records as one.

A chunk holds lines of one model, and the lines are sorted by length across the whole file
before they are cut: each chunk's texts are about the same length, so its Triton calls pad
little and pack well, which no online client sending its own requests can arrange. Output
order is free (OpenAI's batch output is matched by ``custom_id``, not by position).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from ..endpoints.envelope import Measure
from .records import Chunk, Line


def plan(
    batch_id: str,
    lines: Iterable[tuple[Line, dict[str, Any]]],
    measure: Callable[[dict[str, Any]], Measure],
    chunk_texts: int,
) -> list[Chunk]:
    """Chunks of about ``chunk_texts`` texts each (a line is never split), per model,
    lines sorted by their longest text."""
    by_model: dict[str, list[tuple[int, Line, int]]] = defaultdict(list)
    for line, body in lines:
        size = measure(body)
        by_model[size.model].append((size.length, line, max(1, size.texts)))
    chunks: list[Chunk] = []
    for model in sorted(by_model):
        group: list[Line] = []
        texts = 0
        for _, line, count in sorted(by_model[model], key=lambda entry: (entry[0], entry[1].number)):
            if group and texts + count > chunk_texts:
                chunks.append(Chunk(batch_id, len(chunks), model, tuple(group), texts))
                group, texts = [], 0
            group.append(line)
            texts += count
        if group:
            chunks.append(Chunk(batch_id, len(chunks), model, tuple(group), texts))
    return chunks
