"""All settings in one object, read from ``EMBEDGATE_*`` environment variables.

The object is built once (by the CLI or the app factory) and passed down; nothing else
reads the environment.

Each group of settings is a module of its own (the sections of docs/configuration.md):
``server.py``, ``repository.py``, ``triton.py``, ``batching.py``, ``requests.py``,
``residency.py``, ``measuring.py``, ``access.py``, ``images.py``, ``scale_out.py``, ``jobs.py``. ``Settings``
composes them, and owns what spans several: the settings' source (the environment), the
comma-separated lists, and the paths derived from more than one group.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .access import AccessSettings
from .batching import BatchingSettings
from .images import ImageSettings
from .jobs import JobsSettings
from .measuring import MeasuringSettings
from .repository import RepositorySettings
from .requests import RequestSettings
from .residency import ResidencySettings
from .scale_out import ScaleOutSettings
from .server import ServerSettings
from .triton import TritonSettings


# The groups in reverse: pydantic collects fields from the last base to the first, so the
# fields keep this order (server first, jobs last), which `embedgate serve`'s flags and the
# settings' schema follow.
class Settings(
    JobsSettings,
    ScaleOutSettings,
    ImageSettings,
    AccessSettings,
    MeasuringSettings,
    ResidencySettings,
    RequestSettings,
    BatchingSettings,
    TritonSettings,
    RepositorySettings,
    ServerSettings,
    BaseSettings,
):
    # Errors never repeat a value: some settings are secrets (keys, a URL with credentials).
    model_config = SettingsConfigDict(env_prefix="EMBEDGATE_", extra="ignore", hide_input_in_errors=True)

    @field_validator(
        "preload_models", "api_keys", "admin_keys", "key_names", "local_model_dirs", "image_fetch_allow",
        mode="before",
    )
    @classmethod
    def _split_csv(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @property
    def repository_cache(self) -> Path:
        """Where the gateway keeps its copies from a remote repository (and stages conversions)."""
        return self.repository_cache_dir or self.triton_work_dir / "repository-cache"

    @property
    def jobs_state_dir(self) -> Path:
        """Where the bulk jobs' SQLite store lives."""
        if self.jobs_dir is not None:
            return self.jobs_dir
        if self.model_repository.startswith("s3://"):
            return self.repository_cache / "jobs"
        return Path(self.model_repository) / ".embedgate-jobs"
