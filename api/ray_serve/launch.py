"""``embedgate serve --ray``: deploy the application to Ray Serve.

Without ``ray_address`` a local Ray (with its dashboard, where Serve's config API lives)
is started and the command stays in the foreground until interrupted, like ``serve
run``. With ``ray_address`` it deploys to that cluster and returns, like ``serve
deploy``. Deploying again (for another replica count, say) keeps the models the running
application serves.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

from ..settings import Settings
from .app import APP_NAME
from .config_api import ServeConfigApi
from .desired import DesiredModels
from .replica import DEPLOYMENT

IMPORT_PATH = "embedgate.api.ray_serve.app:build"
# Settings that concern the launcher, not the replicas; keys travel in the environment,
# never in the Serve config (which the dashboard shows).
# A replica is one gateway process (Serve scales by replicas): ``workers`` is not theirs.
_LAUNCHER_ONLY = {"host", "port", "workers"} | {
    name for name in Settings.model_fields if name.startswith("ray_") and name != "ray_dashboard_url"
}
_SECRETS = {"api_keys": "EMBEDGATE_API_KEYS", "admin_keys": "EMBEDGATE_ADMIN_KEYS"}


def replica_settings(settings: Settings) -> dict[str, Any]:
    values = settings.model_dump(mode="json", exclude_defaults=True, exclude=_LAUNCHER_ONLY | set(_SECRETS))
    repository = str(settings.model_repository)
    if "://" not in repository:
        values["model_repository"] = str(Path(repository).resolve())
    return values


def deployment_config(settings: Settings, desired: DesiredModels) -> dict[str, Any]:
    deployment: dict[str, Any] = {
        "name": DEPLOYMENT,
        "max_ongoing_requests": settings.ray_max_ongoing_requests,
        "ray_actor_options": {
            "num_cpus": settings.ray_replica_cpus,
            # Ray Serve imports grpc before the replica's code runs (see api/__init__.py).
            "runtime_env": {"env_vars": {"GRPC_ENABLE_FORK_SUPPORT": "0"}},
        },
        "user_config": desired.user_config(),
        "health_check_period_s": settings.ray_health_check_period_s,
    }
    if settings.ray_max_replicas > settings.ray_replicas:
        deployment["autoscaling_config"] = {
            "min_replicas": settings.ray_replicas,
            "initial_replicas": settings.ray_replicas,
            "max_replicas": settings.ray_max_replicas,
            "target_ongoing_requests": settings.ray_target_ongoing_requests,
        }
    else:
        deployment["num_replicas"] = settings.ray_replicas
    if settings.ray_max_replicas_per_node:
        deployment["max_replicas_per_node"] = settings.ray_max_replicas_per_node
    return deployment


def application_config(settings: Settings, desired: DesiredModels) -> dict[str, Any]:
    return {
        "name": APP_NAME,
        "route_prefix": "/",
        "import_path": IMPORT_PATH,
        "args": {"settings": replica_settings(settings)},
        "deployments": [deployment_config(settings, desired)],
    }


async def deploy(api: ServeConfigApi, settings: Settings) -> None:
    """Put the application in the cluster's config, next to any other applications, with
    the models it serves now plus the preloads."""
    details = await api.details()
    running = (details.get("applications") or {}).get(APP_NAME) or {}
    current = DesiredModels()
    if running.get("deployed_app_config"):
        current = await api.desired()
    desired = current.changed(lambda models: [*models, *settings.preload_models])
    apps = [
        app["deployed_app_config"]
        for name, app in (details.get("applications") or {}).items()
        if name != APP_NAME and app.get("deployed_app_config")
    ]
    body: dict[str, Any] = {
        "applications": [*apps, application_config(settings, desired)],
        "http_options": {"host": settings.host, "port": settings.port},
        "proxy_location": settings.ray_proxy_location,
    }
    await api.deploy(body)


def wait_running(timeout_s: float) -> None:
    from ray import serve

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = serve.status().applications.get(APP_NAME)
        if status is not None and status.status == "RUNNING":
            return
        if status is not None and status.status == "DEPLOY_FAILED":
            raise RuntimeError(f"the application failed to deploy: {status.message}")
        time.sleep(0.5)
    raise RuntimeError("the application did not start in time")


def run(settings: Settings) -> None:
    import ray
    from ray import serve

    local = settings.ray_address is None
    for name, variable in _SECRETS.items():
        if getattr(settings, name):
            os.environ[variable] = ",".join(getattr(settings, name))  # inherited by local replicas
    # A local Ray gets a dashboard (Serve's config API) on loopback.
    local_options = {"include_dashboard": True, "dashboard_host": "127.0.0.1"} if local else {}
    context = ray.init(address=settings.ray_address, namespace="embedgate", log_to_driver=local, **local_options)
    dashboard = settings.ray_dashboard_url or f"http://{context.dashboard_url}"
    # Replicas are told the dashboard the launcher found: a local one listens on loopback
    # only, and a cluster's may listen on another port than the 8265 a replica would guess.
    settings = settings.model_copy(update={"ray_dashboard_url": dashboard})
    serve.start(
        http_options={"host": settings.host, "port": settings.port}, proxy_location=settings.ray_proxy_location
    )
    api = ServeConfigApi(dashboard, APP_NAME, DEPLOYMENT)
    asyncio.run(deploy(api, settings))
    wait_running(settings.triton_startup_timeout_s + settings.conversion_timeout_s)
    print(f"embedgate on Ray Serve: http://{settings.host}:{settings.port} (dashboard {dashboard})", flush=True)
    if not local:
        return
    stop = {"now": False}
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.update(now=True))
    while not stop["now"]:
        time.sleep(0.5)
    serve.shutdown()
    ray.shutdown()
