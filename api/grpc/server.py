"""The gateway's gRPC server: TEI's services (``services.py``), the standard health service
and server reflection, on ``EMBEDGATE_GRPC_PORT`` beside the HTTP port, in the gateway's
own event loop (grpcio's asyncio server), started and stopped with the gateway.

Health: ``tei.v1.Info`` and ``tei.v1.Tokenize`` serve while the gateway does (they need
no Triton); ``tei.v1.Embed``, ``tei.v1.Predict``, ``tei.v1.Rerank`` and the server as a
whole (``""``) serve while Triton is ready, read again every ``HEALTH_PERIOD_S``.

Where several gateway processes serve one port (``embedgate serve --workers N``, Ray
replicas on one node), each binds the gRPC port too, with ``SO_REUSEPORT``, and the kernel
spreads connections among them; a gateway alone binds it exclusively, so a port already
taken is an error at startup rather than a port shared with a stranger.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from ..gateway import Gateway
from ..http.auth import KeyRing
from .calls import Calls
from .services import SERVICE_NAMES, TeiServices, add_services

log = logging.getLogger("embedgate.grpc")

HEALTH_PERIOD_S = 2.0
# Served whatever Triton's state: they answer from the gateway alone.
ALWAYS_SERVING = ("tei.v1.Info", "tei.v1.Tokenize")
# Requests larger than the HTTP routes take are refused by gRPC itself (RESOURCE_EXHAUSTED).
RESPONSE_ALLOWANCE = 64 << 20


class GrpcServer:
    """TEI's gRPC API of one gateway process."""

    def __init__(self, gateway: Gateway, keyring: KeyRing, *, shared_port: bool):
        self.gateway = gateway
        self.keyring = keyring
        self.shared_port = shared_port
        self.port: int | None = None
        self._server: grpc.aio.Server | None = None
        self._health = health.aio.HealthServicer()
        # Triton's readiness as the health service last said it (None: not said yet).
        self._ready: bool | None = None
        self._watch: asyncio.Task | None = None

    async def start(self) -> None:
        settings = self.gateway.settings
        server = grpc.aio.server(options=[
            ("grpc.so_reuseport", 1 if self.shared_port else 0),
            ("grpc.max_receive_message_length", settings.max_request_bytes),
            ("grpc.max_send_message_length", RESPONSE_ALLOWANCE),
        ])
        add_services(TeiServices(Calls(self.gateway.endpoints.tei, self.keyring, settings), settings), server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection((*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
        self.port = server.add_insecure_port(f"{settings.host}:{settings.grpc_port}")
        await server.start()
        self._server = server
        for name in ALWAYS_SERVING:
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        await self._report_health()
        self._watch = asyncio.create_task(self._watch_health())
        log.info("TEI's gRPC API on %s:%s", settings.host, self.port)

    async def _report_health(self) -> None:
        """The services that need Triton, as Triton's readiness says (set when it changes:
        a Watch of the health service hears of changes only)."""
        try:
            ready = await self.gateway.triton_ready()
        except Exception:  # noqa: BLE001 - a Triton that cannot say is not ready
            ready = False
        if ready == self._ready:
            return
        self._ready = ready
        status = health_pb2.HealthCheckResponse.SERVING if ready else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ("", *(name for name in SERVICE_NAMES if name not in ALWAYS_SERVING)):
            await self._health.set(name, status)

    async def _watch_health(self) -> None:
        while True:
            await asyncio.sleep(HEALTH_PERIOD_S)
            await self._report_health()

    async def stop(self, grace_s: float = 5.0) -> None:
        """Calls in flight are given ``grace_s`` to finish; streams are then cancelled."""
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        if self._server is not None:
            await self._health.enter_graceful_shutdown()
            await self._server.stop(grace_s)
            self._server = None
