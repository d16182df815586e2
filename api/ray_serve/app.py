"""The Ray Serve application: ``import_path: embedgate.api.ray_serve.app:build``.

``args`` may hold ``settings``: embedgate settings (lowercase field names) for every
replica, on top of the ``EMBEDGATE_*`` environment of the Ray nodes.
"""

from __future__ import annotations

from typing import Any

from ray.serve import Application

from ..settings import Settings
from .replica import EmbedGate

APP_NAME = "embedgate"


def build(args: dict[str, Any]) -> Application:
    overrides = dict((args or {}).get("settings") or {})
    Settings(**overrides)  # bad settings fail the deploy, not every replica's start
    return EmbedGate.bind(overrides)
