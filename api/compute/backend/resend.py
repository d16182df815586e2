"""A Triton call sent again when what was to answer it died: Triton itself (its
supervisor restarts it and reloads the models), or the model's own process in Triton
(whoever loads models here loads it again). Embedding is idempotent, so the client sees a
slower answer instead of a 503. A call that reaches a Triton its supervisor is bringing
back, before its models are loaded again, waits for them too."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

from ...errors import ModelProcessLost, TritonConnectionLost, TritonUnavailable

log = logging.getLogger("embedgate.embedding")
T = TypeVar("T")


class Restartable(Protocol):
    """A Triton the gateway restarts when it dies (the embedded supervisor)."""

    restarts: int
    # Runs with its models loaded (false from its death until they are back).
    serving: bool

    async def wait_restarted(self, since: int) -> bool: ...

    # Waits until it runs with its models loaded (False when it is being stopped).
    async def wait_serving(self) -> bool: ...

# Loads a model part again whose process died under a request sent at a monotonic time.
ReloadLost = Callable[[str, str, float], Awaitable[None]]


async def surviving(
    call: Callable[[], Awaitable[T]], model: str, triton: Restartable | None, reload_lost: ReloadLost | None
) -> T:
    """``call``, sent again each time Triton died under it and its supervisor brought it
    back with the models reloaded, until the request's deadline (which bounds the whole:
    a Triton that dies again during its restart is waited out too); and sent again once
    after the model's own process died under it and the model was loaded again (a second
    death is answered: an input that kills the process must not take it down again and
    again); and sent again once the models are back where it reached a Triton being
    brought back (the model not loaded yet: unknown to it, or not ready)."""
    resent_after_reload = False
    while True:
        restarts = triton.restarts if triton is not None else 0
        serving = triton.serving if triton is not None else True
        sent_at = time.monotonic()
        try:
            return await call()
        except ModelProcessLost as lost:
            if reload_lost is None:
                raise
            try:
                await reload_lost(model, lost.part, sent_at)
            except TritonConnectionLost:
                # Triton itself died during the reload: its restart loads every model again.
                if triton is None or not await triton.wait_restarted(restarts):
                    raise
                log.info("triton restarted while a model was loaded again under a request; sending it again")
                continue
            if resent_after_reload:
                raise
            resent_after_reload = True
            log.info("model %s was loaded again under a request; sending it again", model)
            continue
        except TritonConnectionLost:
            if triton is None or not await triton.wait_restarted(restarts):
                raise
        except TritonUnavailable:  # (after its subclasses, the two above)
            if triton is None or (serving and triton.restarts == restarts):
                raise  # the model is not in a Triton that runs on: the answer
            if not await triton.wait_serving():
                raise
            log.info("a request reached triton while it was being brought back; sending it again")
            continue
        log.info("triton restarted under a request; sending it again")


async def unloaded(
    unload: Callable[[str], Awaitable[None]], parts: Sequence[str], triton: Restartable | None, timeout_s: float
) -> None:
    """Each of a model's ``parts`` unloaded from Triton (``unload``); where Triton is down or
    being brought back, once it is (its restart may load them again: the manifest it read
    held them), within ``timeout_s``. Triton answers the unload of a model it lacks with OK."""
    try:
        async with asyncio.timeout(timeout_s):
            for part in parts:
                await surviving(lambda part=part: unload(part), part, triton, None)
    except TimeoutError:
        raise TritonConnectionLost("the inference server did not come back; retry shortly") from None
