"""The desired state: which models every replica serves, as kept in ``user_config``.

``{"models": [<key>, ...], "revision": <n>}``. A key is what the restart manifest and
EMBEDGATE_PRELOAD_MODELS hold: a sentence-transformer name, or ``<model>:<pretrained>``
for an OpenCLIP model. The revision grows with every change made through the API, so
each change reaches every replica's ``reconfigure()`` (even one that changes nothing,
such as loading again a model a replica failed to load), and a replica's report says
which change it has seen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..models.names import split_clip_key, validate_model_name


@dataclass(frozen=True)
class DesiredModels:
    models: tuple[str, ...] = ()
    revision: int = 0

    @classmethod
    def from_user_config(cls, user_config: Any) -> DesiredModels:
        if not user_config:
            return cls()
        if not isinstance(user_config, dict):
            raise ValueError("user_config must be an object with a 'models' list")
        models = user_config.get("models", [])
        if not isinstance(models, list) or not all(isinstance(key, str) for key in models):
            raise ValueError("user_config 'models' must be a list of model names")
        for key in models:
            check_key(key)
        revision = user_config.get("revision", 0)
        if not isinstance(revision, int) or revision < 0:
            raise ValueError("user_config 'revision' must be a whole number")
        return cls(tuple(dict.fromkeys(models)), revision)

    def user_config(self) -> dict[str, Any]:
        return {"models": list(self.models), "revision": self.revision}

    def changed(self, change: Callable[[list[str]], list[str]]) -> DesiredModels:
        """The next revision, with ``change`` applied to the list of models."""
        return DesiredModels(tuple(dict.fromkeys(change(list(self.models)))), self.revision + 1)


def check_key(key: str) -> str:
    clip = split_clip_key(key)
    validate_model_name(clip[0] if clip else key)
    return key


def adding(key: str) -> Callable[[list[str]], list[str]]:
    return lambda models: models if key in models else [*models, key]


def removing(key: str) -> Callable[[list[str]], list[str]]:
    return lambda models: [model for model in models if model != key]
