"""How fast a model works through its calls, and when a call sent now would finish.

Admitting requests by count alone lets a slow model's queue grow past what it can finish
before the requests' deadlines: the requests at the back then wait out their deadline
(504), and a call that was already computing rows for them throws that work away. The
coalescer (the only batcher of a model the gateway batches) uses this instead to admit by
cost: a request is refused at once (503 with Retry-After) when the call that would carry
it, sent after the calls queued before it, would finish past a share of its deadline; and
a request still waiting when that stops being true (the model ran slower than measured) is
refused then, before any work is done for it.

Work is counted in estimated tokens (``requests/costs.py``): the same estimate on both sides,
the queue's and the measured speed's, so its bias cancels out.

The speed (:class:`Pace`) is each call's service time, from the moment an instance took it
to its answer, over its cost: seconds per unit on one instance. A call sent while every
instance is busy waits in Triton's queue, and is taken when a call before it finishes.
Every call of some size is read (but the very first, which pays for onnxruntime's first
run), so under load the speed is that of the large merged calls the load makes, with the
gateway's own work competing for the cores. A small call is not read: its time is mostly
what any call costs (the hop to Triton, a run's start, the event loop getting round to its
answer), which, taken per unit and laid over a queue, would forecast a burst after a quiet
spell many times slower than the merged calls that serve it. The slowest of the last few
readings counts: a forecast too slow refuses a little early while the model stays busy
with what it admitted, one too fast lets requests run past their deadline.

The forecast (:class:`Schedule`) places the calls to come the way Triton serves them: each
on the instance that frees first. So the last call of a queue, which runs on one instance
while the others idle, counts for what it is.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable

from ...errors import Overloaded
from ..requests.costs import MIN_READ_COST

# The model's first calls, which pay for onnxruntime's first runs: not read.
SKIPPED_CALLS = 1
# The last calls read: the slowest of them counts.
RECENT_CALLS = 5


def past_share(name: str, needed_s: float, deadline_share: float, timeout_s: float, what: str) -> Overloaded:
    """The refusal of a request whose work would take ``needed_s``, past ``deadline_share``
    of its ``timeout_s`` deadline; it says to retry once the excess has drained."""
    retry = min(60, max(1, math.ceil(needed_s - deadline_share * timeout_s)))
    return Overloaded(
        f"{name} has about {needed_s:.0f}s of work {what}, past "
        f"{deadline_share:.0%} of its {timeout_s:g}s deadline; retry in {retry}s",
        retry_after_s=retry,
    )


class Pace:
    """One model's speed: ``unit_s``, the seconds one instance takes per unit of cost
    (None until a call was read)."""

    def __init__(self, instances: int):
        self.instances = max(1, instances)
        self.unit_s: float | None = None
        self._calls = 0
        self._recent: deque[float] = deque(maxlen=RECENT_CALLS)

    @property
    def rate(self) -> float | None:
        """Units per second, all instances together."""
        return None if not self.unit_s else self.instances / self.unit_s

    def call_served(self, cost: float, seconds: float) -> None:
        """An instance took ``seconds`` for a call of ``cost``."""
        self._calls += 1
        if self._calls <= SKIPPED_CALLS or cost < MIN_READ_COST or seconds <= 0 or not math.isfinite(seconds / cost):
            return
        self._recent.append(seconds / cost)
        self.unit_s = max(self._recent)

    def schedule(self, now: float, running: Iterable[tuple[float | None, float]]) -> Schedule | None:
        """The forecast from ``now``, with ``running`` calls as (when an instance took it, or
        None while it waits in Triton's queue; its cost), in the order they were sent."""
        return None if self.unit_s is None else Schedule(now, self.instances, self.unit_s, running)


class Schedule:
    """When calls sent from now on would finish, each on the instance that frees first."""

    def __init__(self, now: float, instances: int, unit_s: float, running: Iterable[tuple[float | None, float]]):
        self.unit_s = unit_s
        queued: list[float] = []
        self._free: list[float] = []  # when each instance is free: a heap
        for started, cost in running:
            if started is None:
                queued.append(cost)
            else:  # one overdue is taken to end now
                self._free.append(max(now, started + cost * unit_s))
        self._free += [now] * max(0, instances - len(self._free))
        heapq.heapify(self._free)
        for cost in queued:
            self.add(cost)

    def finish(self, cost: float) -> float:
        """When a call of ``cost`` sent next would finish."""
        return self._free[0] + cost * self.unit_s

    def add(self, cost: float) -> float:
        """Send a call of ``cost`` next; when it finishes."""
        finish = self.finish(cost)
        heapq.heapreplace(self._free, finish)
        return finish
