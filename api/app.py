"""The FastAPI application factory. Thin on purpose: wiring lives in Gateway, behaviour
in the routes and services."""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI

from . import __version__
from .errors import install_error_handlers
from .gateway import Gateway
from .responses import JSONResponse
from .routes import health, inference, metrics, models
from .settings import Settings


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        gateway = Gateway(settings)
        await gateway.start()
        app.state.gateway = gateway
        try:
            yield
        finally:
            app.state.gateway = None
            await gateway.stop()

    app = FastAPI(
        title="embedgate",
        version=__version__,
        description="Text embeddings from sentence-transformer models served by NVIDIA Triton.",
        lifespan=lifespan,
        default_response_class=JSONResponse,
    )
    install_error_handlers(app)
    for router in (inference.router, models.router, metrics.router, health.router):
        app.include_router(router)
    logging.getLogger("embedgate").setLevel(settings.log_level.upper())
    return app
