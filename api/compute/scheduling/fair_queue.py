"""Where a key's request goes in a model's queue (the coalescer's): behind the requests of
keys under their share of the queued work, ahead of those of keys over theirs.

A key's share is the queued work over the keys with work queued (its own request counted).
A request that keeps its key within its share goes ahead of the run of requests at the back
that belong to keys over theirs; any other request goes to the back, as every request
did before. So a flooding key's requests wait behind a light key's, which is answered as if
the flood were not there, and when the queue is longer than the deadlines allow, the
flooding key's requests are the ones that no longer fit and are refused (at admission, or
when the coalescer sheds what can no longer make its deadline). Anonymous requests (no keys
configured) always go to the back: first come, first served.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol


class Queued(Protocol):
    key: str | None


class KeyShares:
    """The weight (estimated tokens, or texts where no cost is counted) each key has queued."""

    __slots__ = ("_weights", "_total")

    def __init__(self) -> None:
        self._weights: dict[str, float] = {}
        self._total = 0.0

    @property
    def total(self) -> float:
        return self._total

    def weight(self, key: str | None) -> float:
        return self._weights.get(key, 0.0) if key is not None else 0.0

    def add(self, key: str | None, weight: float) -> None:
        if key is not None:
            self._weights[key] = self._weights.get(key, 0.0) + weight
            self._total += weight

    def remove(self, key: str | None, weight: float) -> None:
        if key is None:
            return
        left = self._weights.get(key, 0.0) - weight
        if left > 1e-9:
            self._weights[key] = left
        else:
            self._weights.pop(key, None)
        self._total = max(0.0, self._total - weight) if self._weights else 0.0

    def reset(self, queued: Iterable[tuple[str | None, float]]) -> None:
        self._weights.clear()
        self._total = 0.0
        for key, weight in queued:
            self.add(key, weight)

    def place(self, queue: Sequence[Queued], key: str | None, weight: float) -> int:
        """The index in ``queue`` a new request of ``key`` and ``weight`` goes to."""
        end = len(queue)
        if key is None or not self._weights:
            return end
        keys = len(self._weights) + (key not in self._weights)
        if keys == 1:
            return end
        fair = (self._total + weight) / keys
        if self._weights.get(key, 0.0) + weight > fair:
            return end
        over = {other for other, queued in self._weights.items() if queued > fair}
        at = end
        while at and queue[at - 1].key in over:
            at -= 1
        return at
