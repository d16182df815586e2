"""The online requests waiting in a coalescer (``coalescing.py``) for a call, in the order
they will leave, and what they add up to: their rows, their estimated cost, and each key's
share of them (``fair_queue.py``). The coalescer takes its calls from the front; admission
by cost (``cost_admission.py``) reads the queue to forecast them, and drops the requests it
refuses while they wait."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from .fair_queue import KeyShares

Item = TypeVar("Item")
Share = TypeVar("Share")


@dataclass
class Waiter(Generic[Item, Share]):
    items: list[Item]
    deadline: float  # event-loop time
    arrived: float  # perf_counter time
    future: asyncio.Future[Share]
    cost: float = 0.0  # estimated tokens (with admission by cost)
    admitted: bool = False  # a later part of a request admitted whole: never refused
    key: str | None = None  # its key's keyed hash, where keys share the queue

    @property
    def weight(self) -> float:
        """What it counts for in its key's share of the queue: its cost, else its rows."""
        return self.cost or float(len(self.items))


class Waiting(Generic[Item, Share]):
    """The queue, front first, with its rows, its cost and its keys' shares kept with it."""

    __slots__ = ("queue", "rows", "cost", "_shares")

    def __init__(self) -> None:
        self.queue: deque[Waiter[Item, Share]] = deque()
        self.rows = 0
        self.cost = 0.0
        self._shares = KeyShares()

    def __len__(self) -> int:
        return len(self.queue)

    def __iter__(self) -> Iterator[Waiter[Item, Share]]:
        return iter(self.queue)

    def place(self, waiter: Waiter[Item, Share]) -> int:
        """Where ``waiter`` goes: at the back, or ahead of the keys over their share."""
        if waiter.key is None:
            return len(self.queue)
        return self._shares.place(self.queue, waiter.key, waiter.weight)

    def add(self, waiter: Waiter[Item, Share], at: int) -> None:
        if at == len(self.queue):
            self.queue.append(waiter)
        else:
            self.queue.insert(at, waiter)
        self.rows += len(waiter.items)
        self.cost += waiter.cost
        if waiter.key is not None:
            self._shares.add(waiter.key, waiter.weight)

    @property
    def shares(self) -> KeyShares:
        return self._shares

    def front(self) -> Waiter[Item, Share] | None:
        """The first request still waiting (those cancelled ahead of it dropped)."""
        queue = self.queue
        while queue and queue[0].future.done():
            self._remove(queue.popleft())
        return queue[0] if queue else None

    def take(self, limit: int, belongs: Callable[[str | None], bool] | None = None) -> list[Waiter[Item, Share]]:
        """The requests at the front, up to ``limit`` rows (at least one), those cancelled
        while they waited dropped on the way; with ``belongs``, only as far as the first of
        a key it does not take."""
        taken: list[Waiter[Item, Share]] = []
        rows = 0
        queue = self.queue
        while queue:
            waiter = queue[0]
            done = waiter.future.done()  # cancelled while it waited
            if not done and (
                (taken and rows + len(waiter.items) > limit) or (belongs is not None and not belongs(waiter.key))
            ):
                break
            self._remove(queue.popleft())
            if not done:
                taken.append(waiter)
                rows += len(waiter.items)
        return taken

    def _remove(self, waiter: Waiter[Item, Share]) -> None:
        self.rows -= len(waiter.items)
        self.cost -= waiter.cost
        if waiter.key is not None:
            self._shares.remove(waiter.key, waiter.weight)

    def drop_done(self) -> None:
        """Leave out the requests answered while they waited (refused, cancelled)."""
        if any(waiter.future.done() for waiter in self.queue):
            kept = deque(waiter for waiter in self.queue if not waiter.future.done())
            self.rows = sum(len(waiter.items) for waiter in kept)
            self.cost = sum(waiter.cost for waiter in kept)
            self._shares.reset((waiter.key, waiter.weight) for waiter in kept)
            self.queue = kept

    def cancel(self) -> None:
        while self.queue:
            self.queue.popleft().future.cancel()
        self.rows, self.cost = 0, 0.0
        self._shares.reset(())
