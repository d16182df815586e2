"""Optional per-key limits on inference: requests and estimated tokens per minute
(``EMBEDGATE_KEY_REQUESTS_PER_MINUTE``, ``EMBEDGATE_KEY_TOKENS_PER_MINUTE``).

Each key has a bucket per limit, holding up to a minute's allowance and refilled at the
limit's rate, so a key may burst a minute's worth and then goes at the limit. A request
takes one request and its estimated tokens; one the buckets cannot cover is refused
(``RateLimited``: 429 with Retry-After, the seconds until they can). A request larger than a
whole minute's tokens passes when the bucket is full and leaves it in debt, so it is slowed,
never refused for good. The buckets live in this process (no lock, no I/O on the way): with
several gateway workers each holds its share of the limits.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ...errors import RateLimited
from ...telemetry import count_inputs
from ..requests.costs import items_cost
from . import tenants
from .tenants import Tenant

MINUTE_S = 60.0


@dataclass(frozen=True, slots=True)
class Allowance:
    """One limit as a key stands with it after a request: OpenAI's rate-limit headers."""

    limit: int
    remaining: int
    reset_s: float  # until the bucket is full again


class _Bucket:
    __slots__ = ("limit", "rate", "level", "stamp")

    def __init__(self, limit: int, now: float):
        self.limit = limit
        self.rate = limit / MINUTE_S
        self.level = float(limit)
        self.stamp = now

    def wait_s(self, amount: float, now: float) -> float:
        """Refilled to ``now``: the seconds until ``amount`` (at most a full bucket) is
        there; 0: it is."""
        self.level = min(self.limit, self.level + (now - self.stamp) * self.rate)
        self.stamp = now
        missing = min(amount, self.limit) - self.level
        return missing / self.rate if missing > 0 else 0.0


class Standing:
    """A key's allowances after its request, read from its buckets when asked (the
    headers of an answer); None where that limit is not configured."""

    __slots__ = ("_requests", "_tokens")

    def __init__(self, requests: _Bucket | None, tokens: _Bucket | None):
        self._requests = requests
        self._tokens = tokens

    @property
    def requests(self) -> Allowance | None:
        return _allowance(self._requests)

    @property
    def tokens(self) -> Allowance | None:
        return _allowance(self._tokens)


def _allowance(bucket: _Bucket | None) -> Allowance | None:
    if bucket is None:
        return None
    return Allowance(bucket.limit, max(0, math.floor(bucket.level)), (bucket.limit - bucket.level) / bucket.rate)


class KeyRates:
    def __init__(
        self, requests_per_minute: int, tokens_per_minute: int, clock: Callable[[], float] = time.monotonic
    ):
        self.requests_per_minute = requests_per_minute
        self.tokens_per_minute = tokens_per_minute
        self.active = bool(requests_per_minute or tokens_per_minute)
        self._clock = clock
        # By the key's keyed hash: only configured keys ever get here (bounded).
        self._buckets: dict[str, tuple[_Bucket | None, _Bucket | None]] = {}

    def charge(self, texts: Sequence[str | tuple[str, ...]] = (), images: int = 0) -> Standing | None:
        """The request in progress brings these inputs: counted for its key's metrics, and
        charged to its key's limits (an image counts one token)."""
        count_inputs(len(texts) + images)
        if not self.active:
            return None
        return self.take(tenants.current(), items_cost(texts) + images)

    def charge_more(self, tokens: float) -> None:
        """The request in progress turned out to bring ``tokens`` more than it was charged
        for (a chunked request's overlap): charged to its key's limits now."""
        if tokens > 0 and self.active:
            self.take(tenants.current(), tokens)

    def take(self, tenant: Tenant | None, tokens: float) -> Standing | None:
        """Charge one request of ``tokens`` to ``tenant``'s key; its standing after it (None
        where no limit applies); ``RateLimited`` when its buckets cannot cover it."""
        if tenant is None or not self.active:
            return None
        now = self._clock()
        buckets = self._buckets.get(tenant.owner)
        if buckets is None:
            buckets = self._buckets[tenant.owner] = (
                _Bucket(self.requests_per_minute, now) if self.requests_per_minute else None,
                _Bucket(self.tokens_per_minute, now) if self.tokens_per_minute else None,
            )
        requests, token_bucket = buckets
        wait = requests.wait_s(1.0, now) if requests is not None else 0.0
        if token_bucket is not None:
            wait = max(wait, token_bucket.wait_s(tokens, now))
        if wait > 0:
            raise RateLimited(
                f"this key's limit of {self._limits()} is reached; retry in {math.ceil(wait)}s",
                retry_after_s=max(1, math.ceil(wait)),
                standing=Standing(*buckets),
            )
        if requests is not None:
            requests.level -= 1.0
        if token_bucket is not None:
            token_bucket.level -= tokens
        return Standing(*buckets)

    def _limits(self) -> str:
        parts = []
        if self.requests_per_minute:
            parts.append(f"{self.requests_per_minute} requests")
        if self.tokens_per_minute:
            parts.append(f"{self.tokens_per_minute} tokens")
        return " and ".join(parts) + " per minute"
