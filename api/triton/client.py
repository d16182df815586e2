"""The gateway's only way to talk to Triton.

Inference goes over one gRPC stream (``stream.py``): CPU models are decoupled, which
Triton's HTTP endpoint refuses. Model control (loads can take minutes), health and
statistics go through a pooled ``tritonclient.http.aio`` client. Triton and transport
failures become :mod:`api.errors` exceptions here, so no route has to know what
Triton's messages look like.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import numpy as np
import tritonclient.http.aio as triton_http
from tritonclient.utils import InferenceServerException

from ..errors import (
    DeadlineExceeded,
    EmbedgateError,
    ModelProcessLost,
    Overloaded,
    TritonConnectionLost,
    TritonError,
    TritonUnavailable,
)
from .stream import InferStream, infer_request, output_array

log = logging.getLogger("embedgate.triton")

_CONNECTION_ERRORS = (aiohttp.ClientConnectionError, ConnectionError, OSError)
# A config parameter that only a reload sets (``TritonClient.reload``); models ignore it.
RELOAD_PARAMETER = "embedgate_reloaded_at"


def map_triton_error(exc: BaseException, model: str | None = None) -> EmbedgateError:
    """Turn a Triton or transport failure into the error a client should see."""
    if isinstance(exc, EmbedgateError):
        return exc
    if isinstance(exc, asyncio.TimeoutError):
        return DeadlineExceeded("the request did not finish before its deadline")
    if isinstance(exc, _CONNECTION_ERRORS):
        return TritonConnectionLost("the inference server is unavailable; retry shortly")
    if isinstance(exc, InferenceServerException):
        text = str(exc.message() or "")
        lowered = text.lower()
        if "exceeds maximum queue size" in lowered:
            return Overloaded(f"model '{model}' queue is full; retry shortly")
        if "timeout" in lowered and "request" in lowered:
            return DeadlineExceeded(f"model '{model}' did not answer before the deadline")
        if "stub process" in lowered and "not healthy" in lowered:
            # The model's Python-backend process died (Triton sometimes follows it): the
            # model is loaded again, and the request sent again (``ModelProcessLost``).
            log.warning("triton error for %s: %s", model, text)
            return ModelProcessLost(f"model '{model}' lost its process in the inference server; retry shortly", model or "")
        if "unknown model" in lowered or "is not ready" in lowered or "unavailable" in lowered:
            return TritonUnavailable(f"model '{model}' is not available in the inference server right now")
        log.warning("triton error for %s: %s", model, text)
        return TritonError(f"the inference server failed the request for model '{model}'")
    log.error("unexpected error talking to triton: %r", exc)
    return TritonError("the inference server failed the request")


class TritonClient:
    def __init__(
        self,
        url: str,
        grpc_url: str,
        *,
        control_timeout_s: float,
        load_watch: Callable[[str], Awaitable[None]] | None = None,
    ):
        self.url = url
        self._load_watch = load_watch
        self._infer = InferStream(grpc_url)
        self._control = triton_http.InferenceServerClient(url, conn_limit=8, conn_timeout=control_timeout_s)

    async def close(self) -> None:
        await asyncio.gather(self._infer.close(), self._control.close(), return_exceptions=True)

    async def infer(
        self, triton_name: str, tensors: dict[str, np.ndarray], output: str, *, timeout_s: float, version: str = ""
    ) -> np.ndarray:
        """Run one batch (``tensors`` by input name: token ids and masks, or uint8 pixels)
        through the model (its ``version``: a route's graph) and return its ``output``
        [n, ...]. The call ends at ``timeout_s``; Triton drops the request if it is still
        queued then."""
        # One retry on a broken stream: after a Triton restart the stream the gateway
        # held fails although the server is back.
        deadline = asyncio.get_running_loop().time() + timeout_s
        for attempt in (0, 1):
            try:
                async with asyncio.timeout_at(deadline):
                    response = await self._infer.infer(infer_request(triton_name, tensors, output, timeout_s, version))
                return output_array(response, output)
            except TritonConnectionLost as exc:
                if attempt:
                    raise map_triton_error(exc, triton_name) from None
            except Exception as exc:  # noqa: BLE001 - mapped to the client-facing error
                raise map_triton_error(exc, triton_name) from None
        raise AssertionError("unreachable")

    async def load(self, triton_name: str) -> None:
        """Load a model; ``load_watch`` runs beside it (it may end a Triton whose load hangs)."""
        await self._watched(triton_name, self._control.load_model(triton_name))

    async def reload(self, triton_name: str) -> None:
        """Load a loaded model again, whole: new instances (a new stub for each), the old
        ones retired once the new are ready. A plain load of an unchanged model is a no-op
        in Triton, so the model's own config goes with it, marked with this reload. Watched
        as a load is: its new stubs' handshake can hang the same way."""
        try:
            config = await self._control.get_model_config(triton_name)
        except Exception as exc:  # noqa: BLE001
            raise map_triton_error(exc, triton_name) from None
        config.setdefault("parameters", {})[RELOAD_PARAMETER] = {"string_value": str(time.time_ns())}
        await self._watched(triton_name, self._control.load_model(triton_name, config=json.dumps(config)))

    async def _watched(self, triton_name: str, loading: Awaitable[object]) -> None:
        watch = asyncio.create_task(self._load_watch(triton_name)) if self._load_watch else None
        try:
            await loading
        except Exception as exc:  # noqa: BLE001
            raise map_triton_error(exc, triton_name) from None
        finally:
            if watch is not None:
                watch.cancel()
                await asyncio.gather(watch, return_exceptions=True)

    def abandon(self, triton_name: str, sent_before: float) -> None:
        """The model's process was replaced: the calls sent to the old one before
        ``sent_before`` (monotonic) will never be answered, and fail as lost to it."""
        lost = self._infer.abandon(
            triton_name,
            sent_before,
            lambda: ModelProcessLost(f"model '{triton_name}' lost its process in the inference server", triton_name),
        )
        if lost:
            log.info("%d calls to %s were waiting on its lost process", lost, triton_name)

    async def unload(self, triton_name: str, *, wait_s: float = 30.0) -> None:
        """Unload and wait until Triton has really let go (its unload returns early)."""
        try:
            await self._control.unload_model(triton_name)
        except Exception as exc:  # noqa: BLE001
            raise map_triton_error(exc, triton_name) from None
        deadline = asyncio.get_running_loop().time() + wait_s
        while asyncio.get_running_loop().time() < deadline:
            states = await self.repository_states()
            if states.get(triton_name) not in ("READY", "UNLOADING", "LOADING"):
                return
            await asyncio.sleep(0.05)
        log.warning("model %s still unloading after %.0fs", triton_name, wait_s)

    async def repository_states(self) -> dict[str, str]:
        try:
            index = await self._control.get_model_repository_index()
        except Exception as exc:  # noqa: BLE001
            raise map_triton_error(exc) from None
        return {entry["name"]: entry.get("state", "") for entry in index}

    async def statistics(self) -> list[dict[str, Any]]:
        try:
            stats = await self._control.get_inference_statistics()
        except Exception as exc:  # noqa: BLE001
            raise map_triton_error(exc) from None
        return stats.get("model_stats", [])

    async def is_ready(self) -> bool:
        try:
            return bool(await self._control.is_server_ready())
        except Exception:  # noqa: BLE001 - any failure means "not ready"
            return False

    async def is_live(self) -> bool:
        """Whether Triton answers at all (its readiness also says no while a model loads)."""
        try:
            return bool(await self._control.is_server_live())
        except Exception:  # noqa: BLE001 - any failure means "not live"
            return False
