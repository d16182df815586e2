"""The FastAPI application factory. Thin on purpose: wiring lives in Gateway, behaviour
in the endpoints (``api/endpoints/``) the routes call. The gateway's other faces (TEI's
gRPC API, ``api/grpc``) are given by whoever serves the app, and run with its gateway."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager

from fastapi import FastAPI

from .. import __version__
from ..gateway import Cluster, Gateway
from ..settings import Settings
from ..telemetry import MetricsMiddleware
from . import openapi
from .auth import KeyRing, key_guard
from .errors import install_error_handlers
from .fast_path import FastPath
from .middleware import CancelOnDisconnect, RequestLimits
from .openapi import openai_errors
from .paths import batches, cohere, health, inference, metrics, models, openai, predict, prometheus, rerank, tei
from .responses import JSONResponse

# Requests on these paths (and on those under these prefixes) are cancelled when their client disconnects.
INFERENCE_PATHS = (
    "/infer", "/infer_image", "/v1/embeddings", "/rerank", "/v1/rerank", "/predict", "/tei", "/v2/embed", "/v2/rerank",
)
INFERENCE_PREFIXES = ("/tei/",)
# Uploads may be as large as a batch file; the multipart envelope adds a little.
UPLOAD_PATHS = ("/v1/files",)
MULTIPART_ALLOWANCE = 1 << 20


# Another face of the gateway (TEI's gRPC API): given the gateway and the key ring, the
# context in which it serves, entered once the gateway runs and left before it stops.
Face = Callable[[Gateway, KeyRing], AbstractAsyncContextManager[None]]


def create_app(
    settings: Settings | None = None, *, cluster: Cluster | None = None, faces: Sequence[Face] = ()
) -> FastAPI:
    """The gateway's app; ``cluster`` when it runs as one replica of many (Ray Serve);
    ``faces``: the gateway's other faces, served while the app runs."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        gateway = Gateway(settings, cluster)
        await gateway.start()
        app.state.gateway = gateway
        try:
            async with AsyncExitStack() as serving:
                for face in faces:
                    await serving.enter_async_context(face(gateway, app.state.keyring))
                yield
        finally:
            app.state.gateway = None
            await gateway.stop()

    app = openapi.DocumentedApp(
        settings,
        title="embedgate",
        version=__version__,
        description="Text embeddings from sentence-transformer models served by NVIDIA Triton.",
        lifespan=lifespan,
        default_response_class=JSONResponse,
        telemetry={
            "tracing": settings.opentelemetry,
            "metrics": settings.opentelemetry,
            "logs": settings.opentelemetry,
        },
    )
    install_error_handlers(app)
    app.state.keyring = KeyRing.of(settings)
    app.state.gateway = None
    # Health stays open (probes carry no keys), TEI's too; management needs an admin key when set.
    for router in (health.router, tei.health, tei.named_health):
        app.include_router(router)
    # The routers of endpoint routes (route_table.py) check their keys themselves.
    for endpoint_router in (inference.router, rerank.router, predict.router, cohere.router):
        endpoint_router.include_in(app, settings)
    for router in (metrics.router, models.listing):
        app.include_router(router, **key_guard(settings))
    app.include_router(prometheus.router, **({} if settings.prometheus_without_key else key_guard(settings)))
    for endpoint_router in (openai.router, rerank.v1_router):
        endpoint_router.include_in(app, settings)
    app.include_router(batches.router, **key_guard(settings, documented=openai_errors))
    # The default model's before any model's: /tei/{model} would take /tei/embed as a model.
    for endpoint_router in (tei.router, tei.named_router):
        endpoint_router.include_in(app, settings)
    app.include_router(models.router, **key_guard(settings, admin=True))
    # Innermost: inside the body limits and the cancelling of a request whose client left.
    app.add_middleware(FastPath, routes=lambda: app.routes)
    app.add_middleware(CancelOnDisconnect, paths=INFERENCE_PATHS, prefixes=INFERENCE_PREFIXES)
    app.add_middleware(
        RequestLimits,
        max_body_bytes=settings.max_request_bytes,
        larger={path: settings.batch_max_file_bytes + MULTIPART_ALLOWANCE for path in UPLOAD_PATHS},
    )
    # Outermost, so that it counts and times every answer, the middlewares' own included.
    app.add_middleware(MetricsMiddleware)
    logging.getLogger("embedgate").setLevel(settings.log_level.upper())
    return app
