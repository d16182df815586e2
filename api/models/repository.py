"""The gateway's side of the model repository: opened from the settings, always called
off the event loop (a local disk or S3 may block), its failures answered as 503."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from embedgate.contract.repository import ModelRepository, RepositoryError, open_repository

from ..errors import RepositoryUnavailable
from ..settings import Settings

T = TypeVar("T")


def open_for(settings: Settings) -> ModelRepository:
    return open_repository(settings.model_repository, settings.repository_cache)


async def off_loop(call: Callable[..., T], *args: object) -> T:
    """``call(*args)`` in a worker thread; a repository failure becomes a 503."""
    try:
        return await asyncio.to_thread(call, *args)
    except RepositoryError as error:
        raise RepositoryUnavailable(str(error)) from None
