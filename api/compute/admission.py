"""A bounded number of requests in flight per model: past it, a request is refused at
once (503 with Retry-After) instead of queueing behind work it would wait past its
deadline for."""

from __future__ import annotations

import contextlib
from contextvars import ContextVar

from ..errors import Overloaded
from .served import ServedModel

# The models (by id) the request in progress holds a slot of; tasks it starts copy it.
_admitted: ContextVar[frozenset[int]] = ContextVar("embedgate_admitted", default=frozenset())


def admit(model: ServedModel, limit: int) -> "_Admission | contextlib.nullcontext[None]":
    """One slot of ``model``'s in-flight limit for the request in progress. Inside an
    admission (and in the tasks it starts), admitting the same model again takes no
    second slot: a request with texts and images counts once."""
    if id(model) in _admitted.get():
        return contextlib.nullcontext()
    if model.inflight >= limit:
        raise Overloaded(f"model '{model.name}' has {model.inflight} requests in flight (limit {limit}); retry shortly")
    return _Admission(model)


class _Admission:
    __slots__ = ("_model", "_token")

    def __init__(self, model: ServedModel):
        self._model = model

    def __enter__(self) -> None:
        self._model.inflight += 1
        self._token = _admitted.set(_admitted.get() | {id(self._model)})

    def __exit__(self, *exc: object) -> None:
        _admitted.reset(self._token)
        self._model.inflight -= 1
