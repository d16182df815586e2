"""TEI's gRPC API (text-embeddings-inference's package ``tei.v1``), served beside the HTTP
routes on ``EMBEDGATE_GRPC_PORT`` by the same endpoint objects as TEI's HTTP routes.

- ``proto/tei.proto``: the interface, TEI's services, messages and field numbers;
- ``stubs/``: the messages and services generated from it when the package is built;
- ``messages.py``: a message as the HTTP route's body, an endpoint's answer as a response;
- ``calls.py``: each call's envelope (key, model, deadline, status, metrics);
- ``statuses.py``: errors as the gRPC status codes TEI answers with;
- ``streams.py``: the ``*Stream`` methods' ordered, bounded answering;
- ``services.py``: the five services; ``server.py``: the server, health and reflection.

Whoever serves the app (the command line, a gateway worker, a Ray replica) gives it this
face (:func:`grpc_faces`), so that the HTTP app itself imports nothing of it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from ..settings import Settings

if TYPE_CHECKING:
    from ..gateway import Gateway
    from ..http.app import Face
    from ..http.auth import KeyRing


def grpc_faces(settings: Settings, *, shared_port: bool) -> tuple[Face, ...]:
    """TEI's gRPC API as a face of the app (``http/app.py``'s ``Face``), where
    EMBEDGATE_GRPC_PORT is set; ``shared_port``: gateways that share the HTTP port (workers,
    replicas) share the gRPC port too."""
    if not settings.grpc_port:
        return ()

    @asynccontextmanager
    async def served(gateway: Gateway, keyring: KeyRing) -> AsyncIterator[None]:
        # Imported only where it is served: the grpc extra may not be installed.
        from .server import GrpcServer

        server = GrpcServer(gateway, keyring, shared_port=shared_port)
        await server.start()
        try:
            yield
        finally:
            await server.stop()

    return (served,)
