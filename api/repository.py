"""The gateway's side of the model repository: opened from the settings, always called
off the event loop (a local disk or S3 may block), its failures answered as 503."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from converters.repository import ModelRepository, RepositoryError, open_repository

from .errors import ApiError
from .settings import Settings

T = TypeVar("T")


class RepositoryUnavailable(ApiError):
    status, code = 503, "repository_unavailable"

    def __init__(self, message: str, retry_after_s: int = 5):
        super().__init__(message, headers={"Retry-After": str(retry_after_s)})


def cache_dir(settings: Settings) -> Path:
    return settings.repository_cache_dir or settings.triton_work_dir / "repository-cache"


def open_for(settings: Settings) -> ModelRepository:
    return open_repository(settings.model_repository, cache_dir(settings))


async def off_loop(call: Callable[..., T], *args: object) -> T:
    """``call(*args)`` in a worker thread; a repository failure becomes a 503."""
    try:
        return await asyncio.to_thread(call, *args)
    except RepositoryError as error:
        raise RepositoryUnavailable(str(error)) from None
