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

from ..errors import RateLimited
from ..telemetry import count_inputs
from . import tenants
from .pacing import items_cost
from .tenants import Tenant

MINUTE_S = 60.0


@dataclass(frozen=True, slots=True)
class Allowance:
    """One limit as a key stands with it after a request: OpenAI's rate-limit headers."""

    limit: int
    remaining: int
    reset_s: float  # until the bucket is full again


@dataclass(frozen=True, slots=True)
class Standing:
    """A key's allowances after its request (None: that limit is not configured)."""

    requests: Allowance | None
    tokens: Allowance | None


class _Bucket:
    __slots__ = ("limit", "rate", "level", "stamp")

    def __init__(self, limit: int, now: float):
        self.limit = limit
        self.rate = limit / MINUTE_S
        self.level = float(limit)
        self.stamp = now

    def refill(self, now: float) -> None:
        self.level = min(self.limit, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    def wait_s(self, amount: float) -> float:
        """Seconds until ``amount`` (at most a full bucket) is there; 0: now."""
        missing = min(amount, self.limit) - self.level
        return missing / self.rate if missing > 0 else 0.0

    def allowance(self) -> Allowance:
        return Allowance(self.limit, max(0, math.floor(self.level)), (self.limit - self.level) / self.rate)


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
        wait = 0.0
        for bucket, amount in ((requests, 1.0), (token_bucket, tokens)):
            if bucket is not None:
                bucket.refill(now)
                wait = max(wait, bucket.wait_s(amount))
        if wait > 0:
            raise RateLimited(
                f"this key's limit of {self._limits()} is reached; retry in {math.ceil(wait)}s",
                retry_after_s=max(1, math.ceil(wait)),
                standing=self._standing(buckets),
            )
        if requests is not None:
            requests.level -= 1.0
        if token_bucket is not None:
            token_bucket.level -= tokens
        return self._standing(buckets)

    def _limits(self) -> str:
        parts = []
        if self.requests_per_minute:
            parts.append(f"{self.requests_per_minute} requests")
        if self.tokens_per_minute:
            parts.append(f"{self.tokens_per_minute} tokens")
        return " and ".join(parts) + " per minute"

    @staticmethod
    def _standing(buckets: tuple[_Bucket | None, _Bucket | None]) -> Standing:
        requests, tokens = buckets
        return Standing(
            requests.allowance() if requests is not None else None,
            tokens.allowance() if tokens is not None else None,
        )
