"""A gateway worker's view of the server: the Triton its primary runs, the models its
primary has loaded, and the primary's coordinator of bulk jobs.

The worker serves HTTP with the same app as a single gateway (``create_app`` with this
cluster). What changes is who owns what: loads, unloads and deletes go to the primary,
which runs them once in Triton and then tells every worker the models it serves, waiting
until each has them before it answers; the worker only reads a loaded model's metadata and
tokenizer (``ModelRegistry.adopt``). Triton's state (ready, restarted) is the primary's
supervisor's, told to every worker as it changes.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from typing import TYPE_CHECKING, Any

from ..errors import EmbedgateError, TritonError
from ..jobs.queue import ForwardedQueue
from ..models.control import LoadOutcome
from ..models.progress import Event, Progress
from ..models.registry import ModelRegistry
from ..models.residency import Listed
from ..settings import Settings
from ..triton import instances
from ..triton.server import LostListener, RestartListener
from .channel import Peer

if TYPE_CHECKING:
    from ..gateway import Gateway

log = logging.getLogger("embedgate.workers")
# How long after a lost connection a worker waits to hear that Triton went away, before it
# takes Triton for still up (the supervisor's own rule).
NOTICE_S = 2.0
POLL_S = 0.05


class SharedTriton:
    """The primary's Triton as this worker sees it: its addresses, and its state as the
    primary last reported it. Nothing here starts, stops or reloads anything."""

    # Someone here watches it (the primary): the gateway reloads nothing it lost, and is
    # ready where is_ready() says so and Triton itself answers.
    embedded = True

    def __init__(self, cluster: WorkerCluster):
        self._cluster = cluster
        self.url = ""
        self.grpc_url = ""
        self.metrics_url = ""
        self.restarts = 0
        self.ready = False
        self.serving = False
        self._triton_pid: int | None = None
        self._stopping = False

    def update(self, state: dict[str, Any]) -> None:
        self.ready = state["ready"]
        self.serving = state["serving"]
        self.restarts = state["restarts"]
        self._triton_pid = state.get("triton_pid")

    @property
    def pid(self) -> int | None:
        """The primary's tritonserver (its models' memory is read from /proc, on this host)."""
        return self._triton_pid

    def is_ready(self) -> bool:
        return self.ready

    def on_restart(self, listener: RestartListener) -> None:
        pass  # the primary reloads the models

    def on_lost_process(self, listener: LostListener) -> None:
        pass  # the primary watches Triton's processes

    async def wait_restarted(self, since: int) -> bool:
        """As the supervisor's: wait until the primary has restarted Triton (counted past
        ``since``) and reloaded its models; False when Triton never went away (its process,
        on this machine, still runs). One that died is waited for until the primary tells."""
        noticed = time.monotonic() + NOTICE_S
        while self.restarts == since and not self._stopping:
            if self.serving and time.monotonic() > noticed and self._triton_runs():
                return False
            await asyncio.sleep(POLL_S)
        return await self.wait_serving()

    async def wait_serving(self) -> bool:
        """Wait until the primary tells Triton runs with its models loaded; False when
        this worker is stopping."""
        while not self.serving and not self._stopping:
            await asyncio.sleep(POLL_S)
        return not self._stopping

    def _triton_runs(self) -> bool:
        return self._triton_pid is None or instances.alive(self._triton_pid)

    async def watch_load(self, triton_name: str) -> None:
        pass  # loads run in the primary

    async def start(self) -> None:
        await self._cluster.connect()

    async def stop(self) -> None:
        self._stopping = True
        await self._cluster.close()


class PrimaryQueue(ForwardedQueue):
    """Bulk jobs: the primary's coordinator, shared by every worker's chunk runner."""

    def __init__(self, cluster: WorkerCluster):
        self._cluster = cluster

    async def _forward(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return await self._cluster.call("jobs", name, args, kwargs)


class WorkerCluster:
    def __init__(self, settings: Settings, control_path: str, index: int):
        self.settings = settings
        self.control_path = control_path
        self.index = index
        self.shared = SharedTriton(self)
        self._peer: Peer | None = None
        self._reader: asyncio.Task | None = None
        self._registry: asyncio.Future[ModelRegistry] | None = None
        self._gateway: Gateway | None = None
        # The primary's models as last applied here: registry key -> the primary's serial
        # of that load (a model deleted and converted again is a new load).
        self._held: dict[str, int] = {}
        self._revision = -1
        self._applied = asyncio.Condition()
        self._syncing = asyncio.Lock()
        self._restored = False
        self._progress: dict[int, Progress] = {}
        self._progress_ids = itertools.count()
        self._hello_models: tuple[int, dict[str, int]] = (-1, {})

    # --- the Cluster protocol (api/gateway.py)
    def triton(self) -> SharedTriton:
        return self.shared

    def control(self, registry: ModelRegistry) -> SharedModels:
        assert self._registry is not None, "connect first"
        self._registry.set_result(registry)
        return SharedModels(registry, self)

    def job_queue(self, settings: Settings) -> PrimaryQueue:
        return PrimaryQueue(self)

    async def attached(self, gateway: Gateway) -> None:
        """Serve the primary's models before the app starts (and so before this worker
        listens)."""
        self._gateway = gateway
        assert self._registry is not None
        residency = self._registry.result().residency
        residency.decides = False  # the primary does, for every worker
        residency.listed_elsewhere = self._terms
        await self._sync(*self._hello_models)

    async def gather_metrics(self, own: bytes) -> list[bytes]:
        """This worker's metrics text and every other process's of the server."""
        return [own, *await self.call("gather_metrics", self.index)]

    # --- the line to the primary
    async def connect(self) -> None:
        self._registry = asyncio.get_running_loop().create_future()
        handlers = {
            "sync": self._sync,
            "state": self._state,
            "own_metrics": self._own_metrics,
            "uses": self._uses,
            "progress": self._relay_progress,
            "process_replaced": self._process_replaced,
        }
        self._peer = await Peer.connect(self.control_path, handlers)
        self._reader = asyncio.create_task(self._read(self._peer), name="primary-channel")
        hello = await self._peer.call("hello", self.index, os.getpid())
        self.shared.url, self.shared.grpc_url, self.shared.metrics_url = hello["triton"]
        await self._state(hello["state"])
        # Taken once the registry exists (``attached``); a later change may come first.
        self._hello_models = hello["models"]

    async def _read(self, peer: Peer) -> None:
        await peer.run()
        if not self.shared._stopping:
            # Without its primary a worker has no Triton to serve through and no one to
            # stop it: end the process (the primary, if it lives, starts another).
            log.error("worker %d lost its primary process; exiting", self.index)
            os._exit(3)

    async def close(self) -> None:
        if self._peer is not None:
            await self._peer.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        assert self._peer is not None, "connect first"
        return await self._peer.call(method, *args, **kwargs)

    # --- what the primary tells this worker
    async def _state(self, state: dict[str, Any]) -> None:
        self.shared.update(state)
        if state["restored"] and not self._restored:
            self._restored = True
            self._maybe_applied()

    def _maybe_applied(self) -> None:
        """The gateway serves requests as ready once the primary has restored its models
        and this worker has taken them all."""
        if self._gateway is not None and self._restored and self._revision >= 0:
            self._gateway.cluster_models_applied()

    async def _sync(self, revision: int, models: dict[str, int]) -> None:
        """Serve exactly ``models`` (a revision newer than the last one applied)."""
        assert self._registry is not None
        registry = await self._registry
        async with self._syncing:
            if revision <= self._revision:
                return
            for key in list(self._held):
                if key not in models:
                    registry.forget(key)
                    del self._held[key]
            for key, serial in models.items():
                if self._held.get(key) == serial:
                    continue
                # A new load of a name this worker serves (converted again from a changed
                # source, or deleted and converted again) is taken in place of the old one,
                # which serves until then: Triton has replaced its copy already.
                try:
                    await registry.adopt(key)
                except EmbedgateError as exc:
                    log.error("worker %d could not take model %s: %s", self.index, key, exc.message)
                    registry.forget(key)  # never the old copy's tokenizer on the new graph
                    self._held.pop(key, None)
                    continue
                self._held[key] = serial
            self._revision = revision
        async with self._applied:
            self._applied.notify_all()
        self._maybe_applied()

    async def applied(self, revision: int) -> None:
        """Wait until this worker has applied ``revision`` of the primary's models."""
        async with self._applied:
            await self._applied.wait_for(lambda: self._revision >= revision)

    async def _uses(self) -> dict[str, tuple[bool, float]]:
        """How this worker uses its models, for the primary's memory budget and keep-alive."""
        return {} if self._gateway is None else self._gateway.registry.residency.uses()

    async def _terms(self) -> Listed:
        """What each model's load said, as the primary keeps it."""
        return {name: (pinned, keep_alive_s) for name, (pinned, keep_alive_s) in (await self.call("terms")).items()}

    async def _own_metrics(self) -> bytes:
        if self._gateway is None:
            return b""
        return await self._gateway.own_metrics(triton_scraped=False)

    async def _process_replaced(self, part: str, at: float) -> None:
        """The primary replaced a model's lost process: this worker's calls to the old one
        go again."""
        if self._gateway is not None:
            self._gateway.backend.abandon(part, at)

    async def _relay_progress(self, progress_id: int, event: Event) -> None:
        progress = self._progress.get(progress_id)
        if progress is not None:
            progress.relay(event)

    def follow(self, progress: Progress | None) -> int | None:
        """An id under which the primary's progress events of a load reach ``progress``."""
        if progress is None:
            return None
        progress_id = next(self._progress_ids)
        self._progress[progress_id] = progress
        return progress_id

    def unfollow(self, progress_id: int | None) -> None:
        self._progress.pop(progress_id, None)  # type: ignore[arg-type]


class SharedModels:
    """The management routes' view in a worker: the primary loads, unloads and deletes,
    once for the whole server, and answers after every worker (this one included) has
    taken the change."""

    def __init__(self, registry: ModelRegistry, cluster: WorkerCluster):
        self.registry = registry
        self.cluster = cluster

    async def _change(self, method: str, progress: Progress | None, *args: Any, **kwargs: Any) -> Any:
        progress_id = self.cluster.follow(progress)
        try:
            *answer, revision = await self.cluster.call(method, *args, progress_id=progress_id, **kwargs)
        finally:
            self.cluster.unfollow(progress_id)
        await self.cluster.applied(revision)
        return answer

    async def _loaded(self, answer: list[Any]) -> LoadOutcome:
        key, already_loaded, converted = answer
        model = self.registry.held(key)
        if model is None:
            raise TritonError(f"model '{key}' was loaded, but this gateway worker could not take it (see its log)")
        return LoadOutcome(model, already_loaded=already_loaded, converted=converted)

    async def load_sentence_transformer(self, name: str, model_path: str | None = None, **options: Any) -> LoadOutcome:
        progress = options.pop("progress", None)
        return await self._loaded(await self._change("load_sentence_transformer", progress, name, model_path, **options))

    async def load_clip(self, model_name: str, pretrained: str, **options: Any) -> LoadOutcome:
        progress = options.pop("progress", None)
        return await self._loaded(await self._change("load_clip", progress, model_name, pretrained, **options))

    async def unload(self, name: str, pretrained: str | None = None) -> None:
        await self._change("unload", None, name, pretrained)

    async def delete(self, name: str, pretrained: str | None = None) -> None:
        await self._change("delete", None, name, pretrained)

    async def reload_lost(self, key: str, part: str, sent_at: float) -> None:
        """The model's process in the shared Triton died: the primary loads it again, once
        for the requests of every worker it failed."""
        await self.cluster.call("reload_lost", key, part, sent_at)
