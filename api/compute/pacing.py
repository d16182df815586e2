"""How fast a model works through its queue, and what that means for a request's deadline.

Admitting requests by count alone lets a slow model's queue grow past what it can finish
before the requests' deadlines: the requests at the back then wait out their deadline
(504), and a call that was already computing rows for them throws that work away. The
coalescer (the only batcher of a model the gateway batches) uses this instead to admit by
cost: a request is refused at once (503 with Retry-After) when the work queued before it,
at the model's measured rate, would take more than a share of its deadline, and a request
still waiting when that stops being true (the rate fell, a call took longer) is refused
then, before any work is done for it.

Work is counted in estimated tokens (:func:`text_cost`): the same estimate on both sides,
the queue's and the rate's, so its bias cancels out. The rate is measured two ways:

- a call that started on a free instance took ``duration`` for ``cost``: the model, with
  ``instances`` of them, does ``instances * cost / duration`` (available from the first
  calls, before any queue has formed; not the very first, which pays for onnxruntime's
  first run; a small call's fixed cost makes the model read slower than it is, so a queue
  is refused early rather than late);
- while requests wait in the gateway the model is never idle, so what it finishes over a
  window of at least ``WINDOW_S`` is its rate (every call there queued behind another, so
  its duration alone would say nothing).

Both feed one exponentially weighted average.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

WINDOW_S = 2.0
# The model's first calls, which pay for onnxruntime's first runs: not read.
SKIPPED_CALLS = 1
# Weight of a new reading: about the last five count.
SMOOTHING = 0.3
# Characters per token of an English text, about; a token or two for the special tokens.
CHARS_PER_TOKEN = 4
SPECIAL_TOKENS = 2


def text_cost(item: str | tuple[str, ...]) -> float:
    """A text's (or a pair's) estimated tokens."""
    if isinstance(item, str):
        return len(item) / CHARS_PER_TOKEN + SPECIAL_TOKENS
    return sum(len(part) for part in item) / CHARS_PER_TOKEN + SPECIAL_TOKENS + 1


def items_cost(items: Sequence[str | tuple[str, ...]]) -> float:
    return sum(text_cost(item) for item in items)


class Pace:
    """One model's rate, in cost units per second (None until measured)."""

    def __init__(self, instances: int):
        self.instances = max(1, instances)
        self.rate: float | None = None
        self._window: tuple[float, float] | None = None  # (start time, cost finished by then)
        self._finished = 0.0
        self._calls = 0

    def _reading(self, rate: float) -> None:
        if rate <= 0 or not math.isfinite(rate):
            return
        self.rate = rate if self.rate is None else (1 - SMOOTHING) * self.rate + SMOOTHING * rate

    def call_finished(self, cost: float, duration: float, now: float, *, started_free: bool, saturated: bool) -> None:
        """A call of ``cost`` took ``duration`` (seconds) and ended at ``now``. It
        ``started_free`` when an instance was free for it; the gateway is ``saturated``
        when requests wait in it now."""
        self._finished += cost
        self._calls += 1
        if started_free and duration > 0 and self._calls > SKIPPED_CALLS:
            self._reading(self.instances * cost / duration)
        if not saturated:
            self._window = None
            return
        if self._window is None:
            self._window = (now, self._finished)
            return
        start, finished_then = self._window
        if now - start >= WINDOW_S:
            self._reading((self._finished - finished_then) / (now - start))
            self._window = (now, self._finished)

    def seconds_for(self, cost: float) -> float | None:
        """How long ``cost`` of work takes the model, at its measured rate."""
        return None if self.rate is None else cost / self.rate
