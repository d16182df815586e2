"""One request's texts over the model's idle instances.

A request of many texts reaching a model whose instances are idle would run as one call on
one of them (one single-threaded onnxruntime) while the other cores wait: at one client,
32 sentences took 172 ms where the same batch in-process with every core takes about 105.
Cut into one call per idle instance, the calls run side by side. Each call takes a
contiguous run of the texts sorted by length (little padding inside it), the runs of about
equal total length (they finish together), and the answer is put back in request order.

When and into how many calls is the batching policy's (``BatchingPolicy.spread``); under
load no instance is idle and requests are merged instead, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from ..requests.results import Embeddings

Item = TypeVar("Item")


def cut(items: Sequence[Item], parts: int, length: Callable[[Item], int]) -> list[list[int]]:
    """Row indices of each part: ``items`` sorted by ``length``, cut into ``parts``
    contiguous runs of about equal total length (none empty)."""
    order = sorted(range(len(items)), key=lambda row: length(items[row]))
    parts = max(1, min(parts, len(order)))
    costs = np.cumsum([max(1, length(items[row])) for row in order])
    total = float(costs[-1]) if len(order) else 0.0
    groups: list[list[int]] = []
    start = 0
    for part in range(1, parts):
        # The first row past this part's share of the total, leaving a row for each part after.
        stop = int(np.searchsorted(costs, total * part / parts, side="left")) + 1
        stop = min(max(stop, start + 1), len(order) - (parts - part))
        groups.append(order[start:stop])
        start = stop
    groups.append(order[start:])
    return groups


def joined(shares: Sequence[Embeddings], groups: Sequence[Sequence[int]]) -> Embeddings:
    """The parts' answers as one, in request order; the parts ran side by side, so each
    stage took as long as its slowest part."""
    rows = sum(len(group) for group in groups)
    first = shares[0].vectors
    vectors = np.empty((rows,) + first.shape[1:], dtype=first.dtype)
    counts = [0] * rows
    truncated = [False] * rows
    for share, group in zip(shares, groups):
        vectors[list(group)] = share.vectors
        for row, count, cut_short in zip(group, share.token_counts, share.truncated_rows or [False] * len(group)):
            counts[row] = count
            truncated[row] = bool(cut_short)
    return Embeddings(
        vectors,
        counts,
        sum(truncated),
        tokenize_ms=max(share.tokenize_ms for share in shares),
        inference_ms=max(share.inference_ms for share in shares),
        queue_ms=max(share.queue_ms for share in shares),
        truncated_rows=truncated,
    )
