"""Running parts of one request at the same time."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import TypeVar

T = TypeVar("T")


async def run_all(calls: Sequence[Awaitable[T]]) -> list[T]:
    """Like ``asyncio.gather``, but the first failure cancels the others (and is re-raised
    as it is, not wrapped in an exception group), so a request that cannot succeed stops
    costing work at once. A single call runs in the caller's own task: no task to start, and
    what it checks before its first wait (admission) happens before anything else runs."""
    if len(calls) == 1:
        return [await calls[0]]
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
