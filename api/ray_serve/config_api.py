"""Serve's config API (the Ray dashboard's ``/api/serve/applications/``): read what is
deployed, and deploy a changed config, as ``serve deploy`` does.

A PUT carries the whole declarative config, so changing one application's
``user_config`` is a read-modify-write. Two gateways changing it at once could each
overwrite the other's change; :meth:`ServeConfigApi.change_models` therefore checks
after writing that its change is in place, and writes again on top of the other's if not.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from ..errors import ClusterConfigError
from .desired import DesiredModels

log = logging.getLogger("embedgate.ray")
PATH = "/api/serve/applications/"
# Attempts at a change other writers keep overwriting before giving up.
MAX_WRITES = 8


def _ray_auth_headers() -> dict[str, str]:
    """The cluster's token when Ray's token authentication is on (the default for a local
    Ray since 2.5x): read by Ray's own loader from RAY_AUTH_TOKEN or ~/.ray/auth_token."""
    try:
        from ray._private.authentication.http_token_authentication import get_auth_headers_if_auth_enabled
    except ImportError:
        return {}
    return get_auth_headers_if_auth_enabled({})


@dataclass(frozen=True)
class Replica:
    replica_id: str
    node_ip: str
    state: str


class ServeConfigApi:
    def __init__(
        self,
        dashboard_url: str,
        app_name: str,
        deployment: str,
        *,
        timeout_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        self.url = dashboard_url.rstrip("/") + PATH
        self.app_name = app_name
        self.deployment = deployment
        self._timeout_s = timeout_s
        self._transport = transport

    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=self._timeout_s, transport=self._transport, headers=_ray_auth_headers())

    async def details(self) -> dict[str, Any]:
        async with self._client() as client:
            try:
                response = await client.get(self.url)
            except httpx.HTTPError as exc:
                raise ClusterConfigError(f"Serve's config API is unreachable: {type(exc).__name__}") from None
        if response.status_code != 200:
            raise ClusterConfigError(f"Serve's config API answered {response.status_code}")
        return response.json()

    async def deploy(self, config: dict[str, Any]) -> None:
        async with self._client() as client:
            try:
                response = await client.put(self.url, json=config)
            except httpx.HTTPError as exc:
                raise ClusterConfigError(f"Serve's config API is unreachable: {type(exc).__name__}") from None
        if response.status_code != 200:
            log.error("Serve refused a config: %s", response.text[:2000])
            raise ClusterConfigError(f"Serve refused the new config ({response.status_code})")

    async def desired(self) -> DesiredModels:
        return DesiredModels.from_user_config(self._deployment_config(await self.details()).get("user_config"))

    async def change_models(self, change: Callable[[list[str]], list[str]]) -> DesiredModels:
        """Apply ``change`` to the models in ``user_config`` and deploy; the desired state
        that holds the change (a later revision than the one it was made on)."""
        for _ in range(MAX_WRITES):
            details = await self.details()
            deployment = self._deployment_config(details)
            # A new revision even when the change is already in place: every replica then
            # reconfigures and reports on it (a failed load is tried again).
            wanted = DesiredModels.from_user_config(deployment.get("user_config")).changed(change)
            deployment["user_config"] = wanted.user_config()
            await self.deploy(self._deploy_body(details))
            check = await self.desired()
            if check.revision >= wanted.revision and self._holds(check, change):
                return check
            log.info("the cluster config changed under us; applying the change again")
            await asyncio.sleep(0.1)
        raise ClusterConfigError("the cluster config kept changing; try again")

    async def replicas(self) -> list[Replica]:
        details = await self.details()
        app = (details.get("applications") or {}).get(self.app_name) or {}
        deployment = (app.get("deployments") or {}).get(self.deployment) or {}
        return [
            Replica(r["replica_id"], r.get("node_ip", ""), r.get("state", ""))
            for r in deployment.get("replicas") or []
        ]

    # --- the config document
    @staticmethod
    def _holds(desired: DesiredModels, change: Callable[[list[str]], list[str]]) -> bool:
        return list(desired.models) == list(dict.fromkeys(change(list(desired.models))))

    def _deployment_config(self, details: dict[str, Any]) -> dict[str, Any]:
        app = (details.get("applications") or {}).get(self.app_name)
        config = (app or {}).get("deployed_app_config")
        if not config:
            raise ClusterConfigError(
                f"application '{self.app_name}' was not deployed from a config; deploy it with "
                "'embedgate serve --ray' or 'serve deploy'"
            )
        for deployment in config.setdefault("deployments", []):
            if deployment.get("name") == self.deployment:
                return deployment
        deployment = {"name": self.deployment}
        config["deployments"].append(deployment)
        return deployment

    @staticmethod
    def _deploy_body(details: dict[str, Any]) -> dict[str, Any]:
        """The whole declarative config, as deployed, with our change in it."""
        body: dict[str, Any] = {
            "applications": [
                app["deployed_app_config"]
                for app in (details.get("applications") or {}).values()
                if app.get("deployed_app_config")
            ]
        }
        for key in ("proxy_location", "http_options", "grpc_options", "target_capacity"):
            if details.get(key) is not None:
                body[key] = details[key]
        return body
