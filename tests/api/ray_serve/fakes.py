"""A stand-in for Serve's config API (the dashboard's /api/serve/applications/) and for
the replicas' report board, for unit tests of the cluster logic."""

from __future__ import annotations

import copy
import json
from typing import Any

import httpx


class FakeServeApi:
    """Keeps a declarative config as Serve would and answers GET and PUT like it.
    ``overwrites`` PUTs are followed by another writer's config (to test lost updates)."""

    def __init__(self, app_config: dict[str, Any], replicas: list[dict[str, Any]] | None = None):
        self.config: dict[str, Any] = {"proxy_location": "EveryNode", "http_options": {"host": "0.0.0.0", "port": 8000}, "applications": [app_config]}
        self.replicas = replicas or []
        self.puts: list[dict[str, Any]] = []
        self.overwrites: list[dict[str, Any]] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.method == "PUT":
            body = json.loads(request.content)
            self.puts.append(body)
            self.config = body
            if self.overwrites:
                self.config = self.overwrites.pop(0)
            return httpx.Response(200)
        applications = {}
        for app in self.config["applications"]:
            applications[app["name"]] = {
                "deployed_app_config": copy.deepcopy(app),
                "deployments": {d["name"]: {"replicas": self.replicas} for d in app.get("deployments", [])},
            }
        return httpx.Response(
            200,
            json={
                "proxy_location": self.config.get("proxy_location"),
                "http_options": self.config.get("http_options"),
                "applications": applications,
            },
        )

    @property
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handler)


class _Call:
    def __init__(self, function):
        self._function = function

    async def remote(self, *args):
        return self._function(*args)


class FakeBoard:
    """The ModelBoard actor's methods, awaited as ``board.method.remote(...)`` is."""

    def __init__(self):
        self.reports_by_replica: dict[str, dict[str, Any]] = {}
        self.report = _Call(self.reports_by_replica.__setitem__)
        self.forget = _Call(lambda replica_id: self.reports_by_replica.pop(replica_id, None))
        self.reports = _Call(lambda: dict(self.reports_by_replica))
