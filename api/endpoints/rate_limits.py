"""OpenAI's rate-limit headers (``x-ratelimit-limit-requests``, ``-remaining-``, ``-reset-``,
and the same for tokens), from a key's standing with its per-minute limits
(``compute/scheduling/rates.py``). Sent on every inference answer of a key with limits, and on its 429s."""

from __future__ import annotations

from ..compute.scheduling.rates import Allowance, Standing


def duration(seconds: float) -> str:
    """A reset time as OpenAI writes it: ``20ms``, ``1.5s``, ``6m0s``."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    minutes, rest = divmod(round(seconds, 3), 60)
    return f"{int(minutes)}m{rest:g}s" if minutes else f"{rest:g}s"


def rate_limit_headers(standing: Standing | None) -> dict[str, str]:
    if standing is None:
        return {}
    headers: dict[str, str] = {}
    for what, allowance in (("requests", standing.requests), ("tokens", standing.tokens)):
        if allowance is not None:
            headers.update(_headers(what, allowance))
    return headers


def _headers(what: str, allowance: Allowance) -> dict[str, str]:
    return {
        f"x-ratelimit-limit-{what}": str(allowance.limit),
        f"x-ratelimit-remaining-{what}": str(allowance.remaining),
        f"x-ratelimit-reset-{what}": duration(allowance.reset_s),
    }
