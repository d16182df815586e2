"""Concurrent text requests for one model, merged into shared tokenizer and Triton calls.

Every call to Triton costs about the same up to a fair size, whatever it carries: a hop to
a tokenizer thread, an HTTP round trip, Triton's bookkeeping and its Python stub's. Under
load, many one-sentence requests wait at the same time; sent as one call they pay those
costs once. Where the model has Triton's dynamic batcher, it still merges the calls that
reach it together; where it has none, the coalescer is the model's batcher, with one call
in flight per model instance and one more (``batching.py``).

There is no timer. A merged call leaves as soon as one of ``max_in_flight`` slots is free,
with the requests that waited meanwhile, first come first served, up to ``max_rows`` texts
and up to an equal share of all the texts in the coalescer (waiting or in calls) per slot:
an idle server sends a lone request at once, a busy one sends fewer, larger calls of about
the same size. Without the share, the first call after a lull takes everyone, the next
ones take the stragglers, and the calls stay lopsided: one model instance runs a large
batch while the other runs small ones and waits between them.
A request that is cancelled (its client went away, its deadline passed) before its call
leaves is dropped from it; one cancelled after gets no answer, and the others still do.
A failed call fails each of its requests with the same error. The calls go to a
:class:`Sender` (one route's, ``requests/steps.py``): one call for the items of several
requests, and each request's share of its answer.

Bulk work (``submit_bulk``: a batch job's texts) waits in a lane of its own and
only takes what online requests leave: a bulk call leaves only when no online request waits,
never takes the last slot (an online request arriving finds one free), and is small
(``bulk_busy_rows``) while online requests come and go, so one arriving waits at most for a
small call; after ``quiet_s`` without any, bulk calls grow to ``bulk_idle_rows``, which run
at full speed.

With a :class:`~.cost_admission.CostAdmission` (where the coalescer is the model's only
batcher), online requests are admitted by cost: refused at once, or while they wait, when
their call would finish past a share of their deadline.

With keys, a request goes into the queue (``waiting.py``) where ``fair_queue.py`` places
it: a key under its share of the queued work ahead of the keys over theirs, whose requests
are then the ones refused when the queue grows past the deadlines. While several keys share
the coalescer, a light key's requests leave in calls of their own and the heavy keys' calls
leave the last slot to them (``light_keys.py``): a light key is not queued behind a flood's
calls either.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections import deque
from collections.abc import Awaitable
from typing import Generic, Protocol, TypeVar

from . import tenants
from .cost_admission import CostAdmission, Running
from .light_keys import SHARING_WINDOW_S, LightKeys
from .waiting import Waiter, Waiting

Item = TypeVar("Item")
Merged = TypeVar("Merged")
Share = TypeVar("Share")


class Sender(Protocol[Item, Merged, Share]):
    """Where a coalescer's calls go."""

    def send(self, items: list[Item], timeout_s: float) -> Awaitable[Merged]:
        """One call for the items of several requests, in order."""
        ...

    def share(self, merged: Merged, rows: slice, arrived: float) -> Share:
        """One request's part of a call's answer: its ``rows``, and the perf_counter time it
        arrived (for its queue time)."""
        ...


class Coalescer(Generic[Item, Merged, Share]):
    """Several requests' items merged into calls to ``sender``."""

    def __init__(
        self,
        sender: Sender[Item, Merged, Share],
        *,
        max_rows: int,
        max_in_flight: int,
        bulk_slots: int = 1,
        bulk_busy_rows: int = 8,
        bulk_idle_rows: int = 64,
        quiet_s: float = 0.25,
        admission: CostAdmission[Item, Share] | None = None,
        fair_share: bool = True,
        sharing_window_s: float = SHARING_WINDOW_S,
    ):
        self._send = sender.send
        self._share = sender.share
        self.max_rows = max_rows
        self.max_in_flight = max_in_flight
        # Bulk calls in flight at most: never the last slot (where there is more than one).
        self._reserved = 1 if max_in_flight > 1 else 0
        self.bulk_slots = max(1, min(bulk_slots, max_in_flight - self._reserved))
        self.bulk_busy_rows = bulk_busy_rows
        self.bulk_idle_rows = min(bulk_idle_rows, max_rows)
        self.quiet_s = quiet_s
        self.admission = admission
        self.fair_share = fair_share
        self._waiting: Waiting[Item, Share] = Waiting()
        self._keys = LightKeys(sharing_window_s)
        self._bulk: deque[Waiter[Item, Share]] = deque()
        self._in_flight = 0
        self._bulk_in_flight = 0
        self._light_in_flight = 0
        self._in_flight_rows = 0
        self._last_online = float("-inf")
        self._calls: set[asyncio.Task[None]] = set()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def submit(self, items: list[Item], timeout_s: float, *, admitted: bool = False) -> Share:
        """``items``' share of a call; ``admitted``: a later part of a request whose first part
        was admitted (its cost is counted, and it is not refused, at once or later: its
        other parts' work would be thrown away)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Share] = loop.create_future()
        self._last_online = loop.time()
        tenant = tenants.current() if self.fair_share else None
        if tenant is not None:
            self._keys.seen(tenant.owner, loop.time())
        admission = self.admission
        cost = admission.cost(items) if admission is not None else 0.0
        waiter = Waiter(items, loop.time() + timeout_s, time.perf_counter(), future, cost, admitted,
                        tenant.owner if tenant is not None else None)
        waiting = self._waiting
        at = waiting.place(waiter)
        if admission is not None:
            admission.admit(
                waiting, self._in_flight, items, cost, timeout_s, admitted, at, self._call_rows(len(items))
            )
        waiting.add(waiter, at)
        self._send_waiting()
        # Cancelling the caller cancels the future: its call leaves without it, or ignores it.
        return await future

    async def submit_bulk(self, groups: list[list[Item]], timeout_s: float) -> list[Share]:
        """Bulk work, in groups that calls merge (whole) up to the size bulk calls may have:
        all queued before any leaves, so the first calls are as full as the later ones."""
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[Share]] = [loop.create_future() for _ in groups]
        arrived = time.perf_counter()
        for items, future in zip(groups, futures):
            self._bulk.append(Waiter(items, loop.time() + timeout_s, arrived, future))
        self._send_waiting()
        try:
            return list(await asyncio.gather(*futures))
        except BaseException:
            for future in futures:
                future.cancel()
            raise

    def close(self) -> None:
        for call in list(self._calls):
            call.cancel()
        self._waiting.cancel()
        while self._bulk:
            self._bulk.popleft().future.cancel()

    def _send_waiting(self) -> None:
        while self._in_flight < self.max_in_flight:
            bulk = False
            taken, light = self._take_online() if self._waiting.queue else ([], False)
            if not taken:
                if self._bulk_in_flight >= self.bulk_slots or self._in_flight >= self.max_in_flight - self._reserved:
                    return
                taken = self._take_bulk()
                bulk = True
            if not taken:
                return
            rows = sum(len(waiter.items) for waiter in taken)
            running = None
            admission = self.admission
            if admission is not None:
                cost = admission.cost([item for w in taken for item in w.items]) if bulk else sum(w.cost for w in taken)
                running = admission.sent(cost)
            self._in_flight += 1
            self._bulk_in_flight += bulk
            self._light_in_flight += light
            self._in_flight_rows += 0 if bulk else rows
            if not bulk:
                self._keys.sent(taken)
            call = asyncio.get_running_loop().create_task(self._call(taken, rows, bulk, running, light))
            self._calls.add(call)
            call.add_done_callback(self._calls.discard)

    def _take_online(self) -> tuple[list[Waiter[Item, Share]], bool]:
        """The next online call's requests, and whether they are light keys' (``light_keys.py``):
        first come first served where fewer than two keys share the coalescer; else a light
        key's at the front with the light keys' behind it, or the heavy keys' up to the first
        light one, never in the last slot and in calls of half an equal share (a light key's
        call waits for the first instance to free: the heavy calls' length is its wait)."""
        waiting, keys = self._waiting, self._keys
        if not keys.sharing(asyncio.get_running_loop().time()):
            return waiting.take(self._call_rows()), False
        front = waiting.front()
        if front is None:
            return [], False
        light = keys.judge(waiting.shares)
        if light(front.key):
            return waiting.take(self._call_rows(), light), True
        if self._in_flight - self._light_in_flight >= self.max_in_flight - self._reserved:
            return [], False
        return waiting.take(-(-self._call_rows() // 2), lambda key: not light(key)), False

    def _take_bulk(self) -> list[Waiter[Item, Share]]:
        """Bulk waiters, first come first served, up to the rows bulk calls may carry now."""
        quiet = self._in_flight == self._bulk_in_flight and (
            asyncio.get_running_loop().time() - self._last_online > self.quiet_s
        )
        limit = self.bulk_idle_rows if quiet else self.bulk_busy_rows
        taken: list[Waiter[Item, Share]] = []
        rows = 0
        while self._bulk:
            waiter = self._bulk[0]
            if waiter.future.done():
                self._bulk.popleft()
                continue
            if taken and rows + len(waiter.items) > limit:
                break
            taken.append(self._bulk.popleft())
            rows += len(waiter.items)
        return taken

    def _call_rows(self, extra: int = 0) -> int:
        """The most texts the next call takes: an equal share of all there are per slot."""
        return min(self.max_rows, -(-(self._waiting.rows + extra + self._in_flight_rows) // self.max_in_flight))

    async def _call(
        self, taken: list[Waiter[Item, Share]], row_count: int, bulk: bool = False, running: Running | None = None,
        light: bool = False,
    ) -> None:
        loop = asyncio.get_running_loop()
        finished = False
        try:
            items = taken[0].items if len(taken) == 1 else [item for w in taken for item in w.items]
            # Long enough for the most patient request; each request keeps its own deadline.
            timeout_s = max(0.001, max(w.deadline for w in taken) - loop.time())
            merged = await self._send(items, timeout_s)
            finished = True
        except asyncio.CancelledError:
            for waiter in taken:
                waiter.future.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - every request of the call gets it
            for waiter in taken:
                if not waiter.future.done():
                    waiter.future.set_exception(copy.copy(exc))
        else:
            start = 0
            for waiter in taken:
                rows = slice(start, start + len(waiter.items))
                start = rows.stop
                if waiter.future.done():
                    continue
                try:
                    waiter.future.set_result(self._share(merged, rows, waiter.arrived))
                except Exception as exc:  # noqa: BLE001 - a bad share fails its own request only
                    waiter.future.set_exception(exc)
        finally:
            self._in_flight -= 1
            self._bulk_in_flight -= bulk
            self._light_in_flight -= light
            self._in_flight_rows -= 0 if bulk else row_count
            if not bulk:
                self._keys.ended(taken)
            if running is not None:
                self.admission.ended(running, finished, self._waiting, self._call_rows())  # type: ignore[union-attr]
            self._send_waiting()
