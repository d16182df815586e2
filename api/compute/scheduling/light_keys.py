"""Which keys share a model's coalescer now, and which of them are light: the keys whose
requests leave in calls of their own, through the slot kept for them.

Placed ahead of a flood in the queue (``fair_queue.py``), a light key's request still
waited behind what was already on its way to the model. Measured on 2 cores (MiniLM,
key A flooding ``/infer`` at 2.5 times what the server answers, key B one sentence every
half second, ``bench/tenants.py``), B's median of 1.0 s was 0.15 s in the coalescer's queue
(for a free slot), 0.7-0.8 s in its Triton call and 5 ms tokenizing: the coalescer keeps a
call per instance running and one more waiting in Triton's queue, so B's call waited for
that one, then ran as large as the flood's (about 64 sentences, half a second).

So, while keys share the coalescer (more than one seen in the last ``window_s``):
- a light key's requests (those of a key whose work, waiting and in calls, is within its
  share: all the keys' work over the keys sharing) leave in calls of their own, never
  merged with a heavy key's: a call of one sentence runs in milliseconds;
- the heavy keys' calls leave the last slot free: one call per instance running, none
  waiting in Triton's queue for them, so a light key's call waits only for the first
  instance to free, and runs next;
- the heavy keys' calls carry half an equal share of the texts (``coalescing.py``): that
  wait is what is left of the running calls, and halving them halved it (B's median went
  from about a fifth of A's to about a tenth), for one more Triton hop a call, a few ms
  beside the hundreds a call of some 30 sentences runs.
The window keeps the slot for a key that comes back (B above had a request in the server a
tenth of the time). What it costs the heavy keys is the call waiting in Triton's queue,
which kept an instance from idling while the next call is handed over: under the flood
above the model's threads were busy 94-96% of the time instead of 97-99%, and A's answers
moved within the machine's drift (``docs/limits.md``). Anonymous requests (no keys) are
never light, and with fewer than two keys nothing changes.

A key is counted among those sharing for ``window_s`` after its last request; one whose
requests waited longer than that (a queue past the window, in an overload) is left out of
the count, which makes the others' shares larger, never a key lighter than it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from .fair_queue import KeyShares

# Long enough to span a light key's pauses between requests (seconds, an interactive
# client's); what holding the slot costs meanwhile is above.
SHARING_WINDOW_S = 10.0


class Weighed(Protocol):
    key: str | None

    @property
    def weight(self) -> float: ...


class LightKeys:
    """The keys seen lately (when each last sent) and each key's work in calls in flight."""

    __slots__ = ("window_s", "_seen", "_in_calls")

    def __init__(self, window_s: float = SHARING_WINDOW_S):
        self.window_s = window_s
        self._seen: dict[str, float] = {}  # oldest first
        self._in_calls = KeyShares()

    def seen(self, key: str, now: float) -> None:
        seen = self._seen
        if key in seen:
            del seen[key]  # to the end: the order stays oldest first
        seen[key] = now

    def sharing(self, now: float) -> bool:
        """Whether more than one key was seen in the window (those older forgotten)."""
        seen = self._seen
        while seen:
            oldest = next(iter(seen))
            if now - seen[oldest] <= self.window_s:
                break
            del seen[oldest]
        return len(seen) > 1

    def judge(self, queued: KeyShares) -> Callable[[str | None], bool]:
        """Whether a key is light: its work, ``queued`` and in calls, within its share (all
        the keys' work over the keys sharing), as the work stands now: a call taking a
        key's requests does not move the verdict while it forms."""
        in_calls = self._in_calls
        total, keys = queued.total + in_calls.total, len(self._seen)
        verdicts: dict[str | None, bool] = {None: False}  # anonymous requests: never light

        def light(key: str | None) -> bool:
            verdict = verdicts.get(key)
            if verdict is None:
                verdict = verdicts[key] = (queued.weight(key) + in_calls.weight(key)) * keys <= total
            return verdict

        return light

    def sent(self, waiters: Iterable[Weighed]) -> None:
        for waiter in waiters:
            self._in_calls.add(waiter.key, waiter.weight)

    def ended(self, waiters: Iterable[Weighed]) -> None:
        for waiter in waiters:
            self._in_calls.remove(waiter.key, waiter.weight)
