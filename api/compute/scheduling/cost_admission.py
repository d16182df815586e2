"""Admission by cost in the coalescer (``coalescing.py``): the forecast of when the calls
its queue will make would finish, and the requests refused on it.

With a ``pace`` (``pacing.py``), online requests are admitted by cost: one whose call,
placed after the calls running and the requests waiting (in the calls they will make), would
finish past ``deadline_share`` of its deadline is refused at once; and at each call's end,
one waiting whose call would now finish past that share of what remains of its deadline is
refused, before any work is done for it (503 with Retry-After, both).

The forecast places the calls in flight (``Running``: when an instance took each, and its
cost) and the waiting requests, in the calls they will be sent in, on ``pacing.py``'s
schedule; each call's end reads its service time into the pace.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from ...errors import Overloaded
from .fair_queue import KeyShares
from .pacing import Pace, Schedule, past_share

if TYPE_CHECKING:
    from .coalescing import Waiter

Item = TypeVar("Item")
Share = TypeVar("Share")


@dataclass
class Running:
    """A call in flight, for the forecast: when an instance took it (None while it waits in
    Triton's queue), and its cost."""

    started: float | None
    cost: float


class CostAdmission(Generic[Item, Share]):
    """The coalescer's admission by cost, on the coalescer's own state (set by its
    ``__init__``): its queue, the rows and costs waiting and in flight, its calls running
    and its key shares; the call size is the coalescer's (``_call_rows``)."""

    pace: Pace | None
    deadline_share: float
    name: str
    _cost: Callable[[list[Item]], float] | None
    _waiting: deque[Waiter[Item, Share]]
    _waiting_rows: int
    _waiting_cost: float
    _in_flight: int
    _in_flight_cost: float
    _running: list[Running]
    _shares: KeyShares
    _call_rows: Callable[..., int]

    def _admit(self, items: list[Item], cost: float, timeout_s: float, admitted: bool, at: int) -> None:
        """Overloaded when the request's call, placed at ``at`` in the queue, would finish
        past its share of ``timeout_s`` (never when it starts at once, nor for the later
        parts of a request)."""
        if self.pace is None or self._cost is None:
            return
        unit_s = self.pace.unit_s
        if admitted or unit_s is None or (not self._waiting and self._in_flight < self.pace.instances):
            return
        allowed = self.deadline_share * timeout_s
        # A bound first (it starts once the work ahead is spread over the instances, and its
        # call carries no more than what waits and itself), so a short queue costs no forecast.
        ahead = self._waiting_cost + self._in_flight_cost
        if unit_s * (ahead / self.pace.instances + self._waiting_cost + cost) <= allowed:
            return
        now = asyncio.get_running_loop().time()
        schedule = self._schedule(now)
        assert schedule is not None
        needed = 0.0
        for call in self._upcoming(items, cost, at):
            needed = schedule.add(sum(waiter_cost for _, waiter_cost in call)) - now
            if any(waiter is None for waiter, _ in call):
                break  # the calls after its own do not delay it
        if needed > allowed:
            raise past_share(self.name, needed, self.deadline_share, timeout_s, "queued for this request")

    def _schedule(self, now: float) -> Schedule | None:
        assert self.pace is not None
        return self.pace.schedule(now, ((call.started, call.cost) for call in self._running))

    def _upcoming(
        self, items: list[Item] | None = None, cost: float = 0.0, at: int | None = None
    ) -> Iterator[list[tuple[Waiter[Item, Share] | None, float]]]:
        """The waiting requests (and ``items`` at index ``at`` among them, default last), in
        the calls they will be sent in: lists of (waiter, or None for ``items``; its cost)."""
        extra = len(items) if items is not None else 0
        limit = self._call_rows(extra)
        call: list[tuple[Waiter[Item, Share] | None, float]] = []
        rows = 0
        queue = [(w, len(w.items), w.cost) for w in self._waiting]
        if items is not None:
            queue.insert(len(queue) if at is None else at, (None, extra, cost))
        queue = [entry for entry in queue if entry[0] is None or not entry[0].future.done()]
        for waiter, count, waiter_cost in queue:
            if call and rows + count > limit:
                yield call
                call, rows = [], 0
            call.append((waiter, waiter_cost))
            rows += count
        if call:
            yield call

    def _shed(self) -> None:
        """Refuse the waiting requests whose calls would now finish past the admission share
        of what remains of their deadlines."""
        if self.pace is None or not self._waiting:
            return
        now = asyncio.get_running_loop().time()
        schedule = self._schedule(now)
        if schedule is None:
            return
        for call in list(self._upcoming()):
            finish = schedule.finish(sum(cost for _, cost in call)) - now
            kept = 0.0
            for waiter, cost in call:
                assert waiter is not None
                remaining = waiter.deadline - now
                # The same share as at admission: a request admitted on a true forecast stays.
                if waiter.admitted or finish <= self.deadline_share * remaining:
                    kept += cost
                    continue
                retry = min(60, max(1, math.ceil(finish - remaining)))
                waiter.future.set_exception(Overloaded(
                    f"{self.name} can no longer answer this request within its deadline: its call would "
                    f"take about {finish:.0f}s and {max(0.0, remaining):.0f}s remain; retry in {retry}s",
                    retry_after_s=retry,
                ))
            schedule.add(kept)
        self._drop_done()

    def _drop_done(self) -> None:
        if any(waiter.future.done() for waiter in self._waiting):
            kept = deque(waiter for waiter in self._waiting if not waiter.future.done())
            self._waiting_rows = sum(len(waiter.items) for waiter in kept)
            self._waiting_cost = sum(waiter.cost for waiter in kept)
            self._shares.reset((waiter.key, waiter.weight) for waiter in kept)
            self._waiting = kept

    def _ended(self, running: Running, finished: bool) -> None:
        """A call left its instance: read its service time, let the call waiting in Triton's
        queue start, and refuse the waiting requests that can no longer make it."""
        assert self.pace is not None
        now = asyncio.get_running_loop().time()
        self._running.remove(running)
        self._in_flight_cost -= running.cost
        if running.started is not None:
            if finished:
                self.pace.call_served(running.cost, now - running.started)
            queued = next((call for call in self._running if call.started is None), None)
            if queued is not None:
                queued.started = now
        self._shed()
