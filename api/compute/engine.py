"""What the compute side lends a step (``requests/steps.py``'s ``Engine``): the tokenizer
pool, the image threads, the backend, calls sent a bounded number at a time, and the key's
charge for what a request turned out to run. A step asks these; it never sees the
scheduling around it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from ..settings import Settings
from .backend.base import Backend
from .images.loader import ImageLoader
from .scheduling.concurrency import run_all
from .scheduling.rates import KeyRates
from .scheduling.threads import OffLoopThreads


class ComputeEngine:
    def __init__(
        self, settings: Settings, backend: Backend, pool: OffLoopThreads, images: ImageLoader, rates: KeyRates
    ):
        self.rates = rates
        self.max_chunks = settings.max_chunks_per_request
        self.max_concurrent = settings.max_concurrent_chunks
        # Their own methods, bound once: a step's call goes straight to them.
        self.in_pool = pool.run
        self.infer = backend.infer
        self.load_images = images.load
        self.load_patches = images.load_patches

    async def bounded(self, send: Callable[[Any], Awaitable[np.ndarray]], parts: list) -> list[np.ndarray]:
        """Each part sent, a bounded number at a time: a huge request does not crowd
        everyone else out of Triton's queue, and a cancelled request stops sending parts."""
        gate = asyncio.Semaphore(self.max_concurrent)

        async def one(part: Any) -> np.ndarray:
            async with gate:
                return await send(part)

        return await run_all([one(part) for part in parts])

    def charge_more(self, tokens: float) -> None:
        self.rates.charge_more(tokens)
