"""Admission by cost for a model Triton batches: a CLIP model's towers, the native form, and
models published with gateway batching off.

Such a model's calls are queued and merged by Triton's dynamic batcher, so the gateway
does not see them start (for the models it batches itself, ``pacing.py`` does). What it
sees is the work it has admitted for the model and not yet answered, the backlog, and how
fast work is answered. Admitted by count alone, a burst of large requests (64 clients
sending 8 images each to a ViT-B-32 on two cores: about 50 s of work) waits out its
deadlines in Triton's queue and nothing is answered in time.

The rate is the units answered per second of busy time (time while any of the model's
work was admitted), over the last ``window_s`` seconds of busy time. Under load that is
the model's throughput; at low load it is less (a lone request pays a whole call's fixed
cost on one instance), which only makes the forecast cautious, and at low load the
backlog is short. Work that failed (its deadline, an error) counts its busy time and no
units, so a model falling behind is read slower. Small work (texts of less than
``MIN_READ_COST`` estimated tokens, ``requests/costs.py``) is not read: its time is mostly
what any call costs, and read per unit it would make a burst of large requests look many
times slower.

A request is refused at once (503 with Retry-After) when the backlog and itself, at that
rate, would take more than ``deadline_share`` of its deadline; never while nothing else is
admitted, nor before the model's first answer gives a rate. An admitted request is not
refused later: its deadline goes to Triton with it, which drops a call still queued past it.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

from .pacing import past_share

if TYPE_CHECKING:
    from ..requests.served import ServedModel

T = TypeVar("T")
# Nothing to admit: one for every caller (it keeps no state).
_NOTHING = contextlib.nullcontext()
# Busy seconds the rate is read over: long enough to span a few of a large model's calls,
# short enough to follow the machine's speed.
BUSY_WINDOW_S = 10.0


class Backlog:
    """One Triton model's admitted work (``cost``, in units of the caller's choosing: images,
    estimated tokens) and the rate it is answered at (``rate``, units per second)."""

    def __init__(
        self,
        name: str,
        deadline_share: float,
        *,
        min_read: float = 0.0,
        window_s: float = BUSY_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.name = name
        self.min_read = min_read
        self.deadline_share = deadline_share
        self.window_s = window_s
        self._clock = clock
        self.cost = 0.0
        self.requests = 0
        self._mark = 0.0  # the end of the busy time already read
        self._readings: deque[tuple[float, float]] = deque()  # (busy seconds, units answered)
        self._busy = 0.0
        self._units = 0.0

    @property
    def rate(self) -> float | None:
        """Units answered per busy second, over the window; None until work was answered."""
        return self._units / self._busy if self._busy > 0 and self._units > 0 else None

    @contextlib.contextmanager
    def admitted(self, cost: float, timeout_s: float) -> Iterator[None]:
        """Admit work of ``cost`` under a deadline of ``timeout_s`` for the block's length
        (``Overloaded`` if it would end past its share); the block ending without an
        exception is the work answered."""
        self._admit(cost, timeout_s)
        answered = False
        try:
            yield
            answered = True
        finally:
            self._release(cost, answered)

    def _admit(self, cost: float, timeout_s: float) -> None:
        rate = self.rate
        if self.requests and rate is not None and self.deadline_share > 0:
            needed = (self.cost + cost) / rate
            if needed > self.deadline_share * timeout_s:
                raise past_share(self.name, needed, self.deadline_share, timeout_s, "admitted with this request")
        if not self.requests:
            self._mark = self._clock()  # idle until now: not busy time
        self.requests += 1
        self.cost += cost

    def _release(self, cost: float, answered: bool) -> None:
        now = self._clock()
        if cost >= self.min_read:  # small work's time is mostly what any call costs: not read
            self._read(max(0.0, now - self._mark), cost if answered else 0.0)
        self._mark = now
        self.requests -= 1
        self.cost = max(0.0, self.cost - cost) if self.requests else 0.0

    def _read(self, busy_s: float, units: float) -> None:
        self._readings.append((busy_s, units))
        self._busy += busy_s
        self._units += units
        # Keep the newest window of busy time (at least the newest reading).
        while len(self._readings) > 1 and self._busy - self._readings[0][0] >= self.window_s:
            old_busy, old_units = self._readings.popleft()
            self._busy -= old_busy
            self._units -= old_units


class Backlogs:
    """The backlog of each Triton part of the models Triton batches; a model loaded again
    starts a new one."""

    def __init__(self, deadline_share: float):
        self.deadline_share = deadline_share
        self._known: dict[str, tuple[ServedModel, Backlog]] = {}

    def admitted(
        self, model: ServedModel, part: str | None, cost: Callable[[T], float], work: T, timeout_s: float,
        min_read: float = 0.0,
    ) -> contextlib.AbstractContextManager[None]:
        """``work`` of ``cost(work)`` admitted for the model's Triton model ``part`` (its text
        graph, a CLIP image tower), where Triton batches the model; else (or where ``part`` is
        None: work the gateway does itself) nothing to do. Work of less than ``min_read`` is
        not read for the rate."""
        if part is None or not self.deadline_share or not model.metadata.dynamic_batching:
            return _NOTHING
        known = self._known.get(part)
        if known is None or known[0] is not model:
            backlog = Backlog(f"model '{model.name}'", self.deadline_share, min_read=min_read)
            known = self._known[part] = (model, backlog)
        return known[1].admitted(cost(work), timeout_s)

    def __getitem__(self, triton_name: str) -> Backlog:
        return self._known[triton_name][1]
