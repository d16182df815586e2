"""The Serve deployment: one replica is the whole gateway (the same FastAPI app as
``embedgate serve``) with its own tritonserver, told its models by ``reconfigure()``."""

from __future__ import annotations

import logging
import time
from typing import Any

import ray
from ray import serve
from starlette.types import ASGIApp

from .. import collector
from ..grpc import grpc_faces
from ..http.app import create_app
from ..http.middleware import ServedBy
from ..settings import Settings
from .cluster import ServeCluster
from .config_api import ServeConfigApi
from .desired import DesiredModels

DEPLOYMENT = "EmbedGate"
REPLICA_HEADER = b"x-embedgate-replica"
DASHBOARD_PORT = 8265


def dashboard_url(settings: Settings) -> str:
    """Serve's config API: the setting, else the dashboard on the cluster's head node."""
    if settings.ray_dashboard_url:
        return settings.ray_dashboard_url
    head = ray.get_runtime_context().gcs_address.rsplit(":", 1)[0]
    return f"http://{head}:{DASHBOARD_PORT}"


@serve.deployment(
    name=DEPLOYMENT,
    max_ongoing_requests=256,
    health_check_period_s=5,
    health_check_timeout_s=10,
    graceful_shutdown_timeout_s=20,
)
@serve.ingress()
class EmbedGate:
    async def __init__(self, settings: dict[str, Any] | None = None):
        self.settings = Settings(**(settings or {}))
        logging.basicConfig(
            level=self.settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        context = serve.get_replica_context()
        self.replica_id = context.replica_id.unique_id
        self.cluster = ServeCluster(
            ServeConfigApi(dashboard_url(self.settings), context.app_name, context.deployment),
            self.replica_id,
            ray.util.get_node_ip_address(),
            converge_timeout_s=self.settings.load_timeout_s,
        )
        # Replicas that share a node share the gRPC port (SO_REUSEPORT), as the proxy spreads HTTP.
        self._app = create_app(self.settings, cluster=self.cluster, faces=grpc_faces(self.settings, shared_port=True))
        self._app.add_middleware(ServedBy, header=REPLICA_HEADER, value=self.replica_id)
        self._unready_since: float | None = None
        collector.settle()

    def __serve_build_asgi_app__(self) -> ASGIApp:
        return self._app

    async def reconfigure(self, user_config: dict[str, Any]) -> None:
        gateway = self._app.state.gateway
        await self.cluster.reconcile(gateway.registry, DesiredModels.from_user_config(user_config))
        gateway.cluster_models_applied()

    async def check_health(self) -> None:
        """Serve replaces a replica whose Triton stays down; a restart in progress is fine
        (requests in flight wait for it and are sent again)."""
        gateway = self._app.state.gateway
        if gateway is None:
            raise RuntimeError("the gateway is not running")
        if await gateway.triton_ready():
            self._unready_since = None
            return
        now = time.monotonic()
        self._unready_since = self._unready_since or now
        if now - self._unready_since > self.settings.triton_startup_timeout_s:
            raise RuntimeError("tritonserver has not been ready for too long")

    async def __del__(self) -> None:
        try:
            await self.cluster.leave()
        except Exception:  # the cluster may be going away too
            pass
