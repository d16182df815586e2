"""How a row's chunks reach the late-chunking graph (``CHUNK_STARTED``, ``CHUNK_ENDED``).

A row's chunks are token spans ``[start, end)`` in order, each beginning and ending no
earlier than the one before (chunks with an overlap share tokens). Per token, the graph
gets how many chunks have begun at or before it and how many have ended at or before it;
a token is then in chunk ``k`` exactly where ``ended <= k < started``, whatever the
overlap, and chunk ``k`` is pooled over those tokens. Padding (0, 0) is in no chunk.
The converter traces and checks the graph with these marks, and the gateway sends them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def chunk_marks(width: int, spans: Sequence[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """``(started, ended)`` for a row ``width`` tokens wide whose chunks are ``spans``
    (token positions in the row; in order, none empty)."""
    starts = np.array([start for start, _ in spans], dtype=np.int64)
    ends = np.array([end for _, end in spans], dtype=np.int64)
    if len(spans) and (np.any(np.diff(starts) < 0) or np.any(np.diff(ends) < 0) or np.any(ends <= starts)):
        raise ValueError(f"chunk spans must be in order and not empty: {list(spans)}")
    positions = np.arange(width, dtype=np.int64)
    started = np.searchsorted(starts, positions, side="right").astype(np.int64)
    ended = np.searchsorted(ends, positions, side="right").astype(np.int64)
    return started, ended
