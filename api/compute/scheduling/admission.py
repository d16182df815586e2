"""A bounded number of requests in flight per model: past it, a request is refused at
once (503 with Retry-After) instead of queueing behind work it would wait past its
deadline for.

With keys (``tenants.py``) the limit is shared fairly: a model at its limit still admits
a request whose key holds less than its share (the limit over the keys with requests in
flight, its own counted), and refuses the keys at or over theirs. A key alone may use the
whole limit; when another comes, the flooding key is refused until it is back under its
share, so a light key is never refused for a heavy one's load. The model can then hold
more than the limit for a while, at most twice it: past twice, every key is refused (keys
coming one after another, each under a share that shrinks as they come, would otherwise
add up past it: a share of the limit each for ever more keys).
Anonymous requests (no keys configured) are admitted by the limit alone, as always.
"""

from __future__ import annotations

from ...errors import Overloaded
from ..requests.served import ServedModel
from . import tenants


def admit(model: ServedModel, limit: int, fair_share: bool = True) -> _Admission:
    """One slot of ``model``'s in-flight limit for the request in progress (an endpoint's
    envelope takes it once, whatever the request's parts: a request with texts and images
    counts once)."""
    tenant = tenants.current()
    key = tenant.owner if tenant is not None else None
    if model.inflight >= limit:
        if key is None or not fair_share:
            raise Overloaded(
                f"model '{model.name}' has {model.inflight} requests in flight (limit {limit}); retry shortly"
            )
        if model.inflight >= 2 * limit:
            raise Overloaded(
                f"model '{model.name}' has {model.inflight} requests in flight, twice its limit of {limit} "
                "(keys under their share are admitted past the limit, up to twice it); retry shortly"
            )
        held = model.by_key.get(key, 0)
        keys = len(model.by_key) + (held == 0)
        if held * keys >= limit:  # held >= limit / keys, in integers
            raise Overloaded(
                f"model '{model.name}' is at its limit of {limit} requests in flight and this key holds {held}, "
                f"its share or more ({keys} keys have requests in flight); retry shortly"
            )
    return _Admission(model, key)


class _Admission:
    __slots__ = ("_model", "_key")

    def __init__(self, model: ServedModel, key: str | None):
        self._model = model
        self._key = key

    def __enter__(self) -> None:
        model = self._model
        model.inflight += 1
        if self._key is not None:
            model.by_key[self._key] = model.by_key.get(self._key, 0) + 1

    def __exit__(self, *exc: object) -> None:
        model = self._model
        model.inflight -= 1
        if self._key is not None:
            held = model.by_key[self._key] - 1
            if held:
                model.by_key[self._key] = held
            else:
                del model.by_key[self._key]
