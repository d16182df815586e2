"""Admission by cost in the coalescer (``coalescing.py``): the forecast of when the calls
its queue (``waiting.py``) will make would finish, and the requests refused on it.

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from ...errors import Overloaded
from .pacing import Pace, Schedule, past_share
from .waiting import Waiter, Waiting

Item = TypeVar("Item")
Share = TypeVar("Share")


@dataclass
class Running:
    """A call in flight, for the forecast: when an instance took it (None while it waits in
    Triton's queue), and its cost."""

    started: float | None
    cost: float


class CostAdmission(Generic[Item, Share]):
    """One coalescer's admission by cost: ``pace`` the model's speed, ``cost`` what items
    cost (estimated tokens), the calls it has in flight (:class:`Running`). The coalescer
    hands it its queue and, for the forecast, the most rows its next call takes (``limit``)."""

    def __init__(
        self, pace: Pace, cost: Callable[[list[Item]], float], *, deadline_share: float = 0.8,
        name: str = "the model",
    ):
        self.pace = pace
        self.cost = cost
        self.deadline_share = deadline_share
        self.name = name
        self.running: list[Running] = []  # in the order sent
        self.in_flight_cost = 0.0

    def admit(
        self, waiting: Waiting[Item, Share], in_flight: int, items: list[Item], cost: float, timeout_s: float,
        admitted: bool, at: int, limit: int,
    ) -> None:
        """Overloaded when the request's call, placed at ``at`` in the queue, would finish
        past its share of ``timeout_s`` (never when it starts at once, nor for the later
        parts of a request)."""
        unit_s = self.pace.unit_s
        if admitted or unit_s is None or (not waiting.queue and in_flight < self.pace.instances):
            return
        allowed = self.deadline_share * timeout_s
        # A bound first (it starts once the work ahead is spread over the instances, and its
        # call carries no more than what waits and itself), so a short queue costs no forecast.
        ahead = waiting.cost + self.in_flight_cost
        if unit_s * (ahead / self.pace.instances + waiting.cost + cost) <= allowed:
            return
        now = asyncio.get_running_loop().time()
        schedule = self._schedule(now)
        assert schedule is not None
        needed = 0.0
        for call in _upcoming(waiting, limit, items, cost, at):
            needed = schedule.add(sum(waiter_cost for _, waiter_cost in call)) - now
            if any(waiter is None for waiter, _ in call):
                break  # the calls after its own do not delay it
        if needed > allowed:
            raise past_share(self.name, needed, self.deadline_share, timeout_s, "queued for this request")

    def sent(self, cost: float) -> Running:
        """A call of ``cost`` left: running where an instance is free, else in Triton's queue."""
        started = sum(call.started is not None for call in self.running) < self.pace.instances
        running = Running(asyncio.get_running_loop().time() if started else None, cost)
        self.running.append(running)
        self.in_flight_cost += cost
        return running

    def ended(self, running: Running, finished: bool, waiting: Waiting[Item, Share], limit: int) -> None:
        """A call left its instance: read its service time, let the call waiting in Triton's
        queue start, and refuse the waiting requests that can no longer make it."""
        now = asyncio.get_running_loop().time()
        self.running.remove(running)
        self.in_flight_cost -= running.cost
        if running.started is not None:
            if finished:
                self.pace.call_served(running.cost, now - running.started)
            queued = next((call for call in self.running if call.started is None), None)
            if queued is not None:
                queued.started = now
        self._shed(waiting, limit)

    def _schedule(self, now: float) -> Schedule | None:
        return self.pace.schedule(now, ((call.started, call.cost) for call in self.running))

    def _shed(self, waiting: Waiting[Item, Share], limit: int) -> None:
        """Refuse the waiting requests whose calls would now finish past the admission share
        of what remains of their deadlines."""
        if not waiting.queue:
            return
        now = asyncio.get_running_loop().time()
        schedule = self._schedule(now)
        if schedule is None:
            return
        for call in list(_upcoming(waiting, limit)):
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
        waiting.drop_done()


def _upcoming(
    waiting: Waiting[Item, Share], limit: int, items: list[Item] | None = None, cost: float = 0.0,
    at: int | None = None,
) -> Iterator[list[tuple[Waiter[Item, Share] | None, float]]]:
    """The waiting requests (and ``items`` at index ``at`` among them, default last), in the
    calls of at most ``limit`` rows they will be sent in: lists of (waiter, or None for
    ``items``; its cost)."""
    call: list[tuple[Waiter[Item, Share] | None, float]] = []
    rows = 0
    queue = [(w, len(w.items), w.cost) for w in waiting]
    if items is not None:
        queue.insert(len(queue) if at is None else at, (None, len(items), cost))
    queue = [entry for entry in queue if entry[0] is None or not entry[0].future.done()]
    for waiter, count, waiter_cost in queue:
        if call and rows + count > limit:
            yield call
            call, rows = [], 0
        call.append((waiter, waiter_cost))
        rows += count
    if call:
        yield call
