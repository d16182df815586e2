"""How a gateway reaches its coordinator: in this process (the coordinator's calls block,
so they run in a thread), or in a Ray actor shared by every replica of the Ray Serve
application (``api/ray_serve/jobs.py``). Either way a call is ``await queue.call(name, ...)``."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from .coordinator import Coordinator


class JobQueue(Protocol):
    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any: ...


class LocalQueue:
    def __init__(self, coordinator: Coordinator):
        self.coordinator = coordinator
        # SQLite serializes writers anyway; one call at a time keeps the order of a worker's calls.
        self._lock = asyncio.Lock()

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        async with self._lock:
            return await asyncio.to_thread(getattr(self.coordinator, method), *args, **kwargs)
