"""The gateway's HTTP server: where it listens, how many processes share the port, its log
level and per-request OpenTelemetry; and TEI's gRPC API beside it."""

from __future__ import annotations

import importlib.util
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field

# What serving TEI's gRPC API imports beyond the gateway's own dependencies: the stubs the
# package's build generates, and the standard health and reflection services (the grpc extra).
GRPC_NEEDS = {
    "embedgate.api.grpc.stubs.tei_pb2": "TEI's gRPC stubs are generated when the package is built: install it "
    "(make install, or pip install .)",
    "grpc_health": "TEI's gRPC API needs grpcio-health-checking: pip install 'embedgate[grpc]'",
    "grpc_reflection": "TEI's gRPC API needs grpcio-reflection: pip install 'embedgate[grpc]'",
}


def _grpc_servable(port: int) -> int:
    """``port`` itself, unless it asks for TEI's gRPC API and what serving it imports is missing."""
    if port:
        for module, hint in GRPC_NEEDS.items():
            if importlib.util.find_spec(module) is None:
                raise ValueError(hint)
    return port


class ServerSettings(BaseModel):
    host: str = Field("127.0.0.1", description="Address the gateway listens on.")
    port: int = Field(8686, ge=0, le=65535, description="Port the gateway listens on.")
    workers: int = Field(
        0, ge=0, le=64, description="Gateway processes sharing the port, one Triton and one model lifecycle; 0: one "
        "per four CPU cores on a CPU host (1 on up to 7 cores), one per core up to 8 on a GPU host; 1: one process.",
    )
    grpc_port: Annotated[int, AfterValidator(_grpc_servable)] = Field(
        0, ge=0, le=65535, description="Port of TEI's gRPC API (package tei.v1, on the host above); 0: not served. Off "
        "unless asked: a second open port is the operator's choice (a container or a Kubernetes service must "
        "publish it), and every gateway of a test or a host would otherwise contend for one default port. Needs "
        "the grpc extra (pip install \"embedgate[grpc]\").",
    )
    grpc_stream_window: int = Field(
        32, ge=1, le=1024, description="Requests of one gRPC stream in flight at once; past them the stream's next "
        "requests are not read until the oldest is answered and sent.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="Log level.")
    opentelemetry: bool = Field(False, description="FastAPI's OpenTelemetry spans and metrics for each request, "
                                "sent to the providers an OpenTelemetry SDK configures (off: Prometheus at "
                                "/metrics/prometheus needs none, and the per-request provider checks cost CPU).")
