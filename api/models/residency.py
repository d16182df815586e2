"""Which models stay loaded: each loaded model's memory, the memory budget a load makes room
under, and the keep-alive after which an idle model is unloaded.

A load into Triton (``loading.py``) runs inside :meth:`Residency.loading`: under a budget,
loads go one at a time; before one, the least recently used idle models are unloaded until
the model's expected memory fits (``budget.py`` chooses, or refuses with 507); after it,
its memory is measured (``memory.py``) and, where it took more than expected, idle models
are unloaded until the budget holds again. A model is in use while requests for it are in
flight or queued, while requests wait for its load, or while a bulk job's calls run on it:
never unloaded then. Pinned models are never unloaded to make room. What a load said
(pinned, its keep-alive) are its :class:`Terms`.

Expected memory: what the model held when it was last measured in this process, else the
loaded models' mean per Triton part times its parts (else nothing: the first load is
measured after).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from ..compute.backend.base import Backend
from ..compute.requests.served import ServedModel
from ..errors import EmbedgateError, MemoryBudgetExceeded
from ..settings import Settings
from ..telemetry.metrics import MODEL_UNLOADS
from .budget import MIB, Holder, to_unload
from .memory import MemoryMeter, Reading, gpu_by_part, grown_by, model_bytes

log = logging.getLogger("embedgate.residency")
# How often idle models are looked at for their keep-alive.
KEEP_ALIVE_TICK_S = 0.25
# A model's memory, by memory ("host", "gpu"): what it holds where it was measured.
Figures = dict[str, int]
# The use other processes make of the models, by model: in use there, and seconds idle there
# (a workers' primary asks its workers; a model no other process serves is not listed).
Uses = dict[str, tuple[bool, float]]
# What each loaded model's load said, as listed: pinned, and the keep-alive in force (seconds).
Listed = dict[str, tuple[bool, float]]


@dataclass(frozen=True)
class Terms:
    """What a model's load said: pinned (never unloaded to make room), and its keep-alive
    (seconds idle before it is unloaded; -1 for ever; None: the server's)."""

    pinned: bool = False
    keep_alive_s: float | None = None


class Owner(Protocol):
    """What of the registry residency needs: its settings and backend, the served models,
    their locks, and taking one out of service."""

    settings: Settings
    backend: Backend

    def loaded(self) -> list[ServedModel]: ...

    def held(self, key: str) -> ServedModel | None: ...

    def lock(self, triton_name: str) -> asyncio.Lock: ...

    async def stop_serving(self, model: ServedModel) -> None: ...


class Residency:
    def __init__(self, owner: Owner, meter: MemoryMeter):
        self.owner = owner
        self.settings = owner.settings
        self.meter = meter
        self.budgets = {
            "host": int(self.settings.memory_budget_mb * MIB), "gpu": int(self.settings.gpu_memory_budget_mb * MIB),
        }
        self._terms: dict[str, Terms] = {}
        # What each model's parts inside tritonserver's own process took at its load.
        self._in_server: dict[str, int] = {}
        # Each model's figures when last measured (what its next load expects).
        self._known: dict[str, Figures] = {}
        # Requests waiting for a model's load (``first_request.py``), by model.
        self.waiting: Counter[str] = Counter()
        self._budget_lock = asyncio.Lock()
        # Where other processes serve these models (a workers' primary: its workers, which
        # take its requests), how they use them: asked before each decision.
        self.used_elsewhere: Callable[[], Awaitable[Uses]] | None = None
        # False in a gateway worker: its primary loads, unloads and keeps the terms, and
        # says them (``listed_elsewhere``).
        self.decides = True
        self.listed_elsewhere: Callable[[], Awaitable[Listed]] | None = None

    @property
    def budgeted(self) -> bool:
        return any(budget > 0 for budget in self.budgets.values())

    # --- what a load said
    def agreed(self, key: str, *, fresh: bool, pinned: bool | None = None, keep_alive_s: float | None = None) -> None:
        """The terms of ``key``'s load: ``fresh`` (it was not loaded before) starts from the
        server's; a term given (not None) replaces the one it had."""
        terms = Terms() if fresh else self._terms.get(key, Terms())
        self._terms[key] = Terms(
            terms.pinned if pinned is None else pinned, terms.keep_alive_s if keep_alive_s is None else keep_alive_s
        )

    def terms(self, key: str) -> Terms:
        return self._terms.get(key, Terms())

    def keep_alive_s(self, key: str) -> float:
        own = self.terms(key).keep_alive_s
        return self.settings.model_keep_alive_s if own is None else own

    def listed(self) -> Listed:
        """Each loaded model's terms as ``/loaded_models`` lists them."""
        return {model.name: (self.terms(model.name).pinned, self.keep_alive_s(model.name)) for model in self.owner.loaded()}

    async def listed_terms(self) -> Listed:
        """:meth:`listed`, from whoever keeps the terms (a gateway worker asks its primary)."""
        if self.decides or self.listed_elsewhere is None:
            return self.listed()
        return await self.listed_elsewhere()

    def in_use(self, model: ServedModel) -> bool:
        return model.inflight > 0 or model.bulk_calls > 0 or self.waiting[model.name] > 0

    def uses(self) -> Uses:
        """This process's use of its models (what a gateway worker tells its primary)."""
        now = time.monotonic()
        return {model.name: (self.in_use(model), now - model.last_used) for model in self.owner.loaded()}

    async def _elsewhere(self) -> Uses:
        return {} if self.used_elsewhere is None else await self.used_elsewhere()

    def _busy(self, model: ServedModel) -> bool:
        """In use, or being loaded again or unloaded (its lock held)."""
        return self.in_use(model) or self.owner.lock(model.triton_name).locked()

    # --- memory
    async def figures(self) -> dict[str, Figures]:
        """Each loaded model's memory now (host where tritonserver runs here, GPU where its
        GPU instances report it)."""
        models = self.owner.loaded()
        reading = await self._read()
        gpu = await self._gpu(models)
        figures: dict[str, Figures] = {}
        for model in models:
            own: Figures = {}
            if reading.server is not None:
                own["host"] = model_bytes(model.triton_names, reading, self._in_server.get(model.name, 0))
            reported = [gpu[part] for part in model.triton_names if part in gpu]
            if reported:
                own["gpu"] = sum(reported)
            figures[model.name] = own
            self._known[model.name] = own
        return figures

    async def _read(self) -> Reading:
        return await asyncio.to_thread(self.meter.read)

    async def _gpu(self, models: list[ServedModel]) -> dict[str, int]:
        return await gpu_by_part(self.owner.backend, models)

    # --- loads under the budget
    @contextlib.asynccontextmanager
    async def loading(self, key: str, parts: tuple[str, ...]) -> AsyncIterator[None]:
        """Around ``key``'s load into Triton (its lock held): room made first, its memory
        measured after."""
        async with self._budget_lock if self.budgeted else contextlib.nullcontext():
            before = await self._read()
            if self.budgeted:
                await self._make_room(key, parts)
            yield
            self._in_server[key] = grown_by(parts, before, await self._read())
            if self.budgeted:
                await self._settle(key)

    async def _make_room(self, key: str, parts: tuple[str, ...]) -> None:
        for _ in range(3):  # an unload that found its model busy meanwhile: choose again
            figures = await self.figures()
            expected = self._known.get(key) or self._typical(figures, len(parts))
            chosen = to_unload(self._holders(figures, key, await self._elsewhere()), expected, self.budgets, key)
            if not chosen:
                return
            if all([await self.unload(holder.name, "budget") for holder in chosen]):
                return

    def _typical(self, figures: dict[str, Figures], parts: int) -> Figures:
        """What a model of ``parts`` Triton models never measured here is expected to hold:
        as many times the loaded models' mean per part."""
        counts = {model.name: max(1, len(model.triton_names)) for model in self.owner.loaded()}
        totals: dict[str, list[int]] = {}
        for name, own in figures.items():
            for memory, size in own.items():
                held = totals.setdefault(memory, [0, 0])
                held[0] += size
                held[1] += counts.get(name, 1)
        return {memory: size * max(1, parts) // count for memory, (size, count) in totals.items()}

    async def _settle(self, key: str) -> None:
        """After ``key`` loaded: where it took more than expected, idle models unloaded until
        the budget holds again (never ``key`` itself)."""
        figures = await self.figures()
        holders = self._holders(figures, key, await self._elsewhere())
        try:
            chosen = to_unload(holders, figures.get(key, {}), self.budgets, key)
        except MemoryBudgetExceeded as refused:  # it is loaded: past the budget until models go idle
            log.warning("model %s is loaded past the memory budget: %s", key, refused.message)
            return
        for holder in chosen:
            await self.unload(holder.name, "budget")

    def _holders(self, figures: dict[str, Figures], loading: str, elsewhere: Uses) -> list[Holder]:
        now = time.monotonic()
        holders = []
        for model in self.owner.loaded():
            if model.name == loading:
                continue
            busy, last_used = self._busy(model), model.last_used
            if model.name in elsewhere:
                in_use, idle_s = elsewhere[model.name]
                busy, last_used = busy or in_use, max(last_used, now - idle_s)
            holders.append(Holder(model.name, figures.get(model.name, {}), last_used, busy, self.terms(model.name).pinned))
        return holders

    async def unload(self, key: str, reason: str) -> bool:
        """``key`` unloaded by the server itself (``reason``: "budget", "idle") where it is
        still loaded and idle; False where it was busy (in use, or being loaded or unloaded)."""
        model = self.owner.held(key)
        if model is None:
            return True
        lock = self.owner.lock(model.triton_name)
        if lock.locked():
            return False
        async with lock:  # free: taken at once
            if self.owner.held(key) is not model or self.in_use(model):
                return False
            idle_s = time.monotonic() - model.last_used
            held = self._known.get(key, {}).get("host")
            await self.owner.stop_serving(model)
        self._terms.pop(key, None)
        MODEL_UNLOADS.labels(key, reason).inc()
        memory = "" if held is None else f", {held / MIB:.0f} MiB of host memory"
        why = "to make room under the memory budget" if reason == "budget" else "its keep-alive ran out"
        log.info("model %s unloaded (%s): %s; idle %.1fs%s", key, reason, why, idle_s, memory)
        return True

    # --- keep-alive
    async def expire_idle(self) -> None:
        """Unload, for ever, each idle model past its keep-alive (a task of the model host)."""
        while True:
            await asyncio.sleep(KEEP_ALIVE_TICK_S)
            await self.expire(time.monotonic())

    async def expire(self, now: float) -> None:
        """Unload each model idle since before ``now`` less its keep-alive (here and wherever
        else it is served)."""
        due = [
            (model, keep) for model in self.owner.loaded()
            if (keep := self.keep_alive_s(model.name)) >= 0 and not self.in_use(model) and now - model.last_used >= keep
        ]
        elsewhere = await self._elsewhere() if due else {}
        for model, keep in due:
            in_use, idle_s = elsewhere.get(model.name, (False, now - model.last_used))
            if in_use or idle_s < keep:
                continue
            try:
                await self.unload(model.name, "idle")
            except EmbedgateError as exc:
                log.error("could not unload idle model %s: %s", model.name, exc.message)
