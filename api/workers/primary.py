"""The primary process of ``embedgate serve --workers N``: one Triton, one model lifecycle
and one coordinator of bulk jobs for N gateway workers that listen on one port.

It runs no HTTP itself. It starts (or connects to) Triton and supervises it, restores the
manifest's models, converts and loads what any worker is asked to load (once: the
registry's per-model lock makes a second ask wait and find it loaded), and after every
change tells each worker the models it serves, answering the worker that asked only when
all of them have taken the change. Workers reach it over a Unix socket in a directory of
its own (``channel.py``); it starts them, and starts a new one when one dies.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import shutil
import signal
import socket
import tempfile
from pathlib import Path
from typing import Any

from ..compute.backend.triton import TritonBackend, triton_for
from ..errors import EmbedgateError
from ..jobs.checkpoint import open_coordinator
from ..jobs.queue import LocalQueue, forwarded
from ..models.host import ModelHost
from ..models.progress import Progress
from ..models.refs import ModelRef
from ..models.residency import Listed, Uses
from ..settings import Settings
from ..telemetry import scrape
from ..triton.server import TritonServer
from .channel import Peer
from .pool import WorkerPool
from .sockets import reserve_port

log = logging.getLogger("embedgate.workers")
STATE_POLL_S = 0.05
# A worker that does not take a change in this long is left behind (and logged): the
# others, and the client that asked, do not wait for it forever.
SYNC_TIMEOUT_S = 60.0
METRICS_TIMEOUT_S = 5.0
CONTROL_SOCKET = "control.sock"


class Primary:
    def __init__(self, settings: Settings, workers: int):
        self.settings = settings
        self.workers = workers
        self.host = ModelHost(settings)
        self.triton: TritonServer = triton_for(settings)
        self.peers: dict[Peer, int] = {}
        self.revision = 0
        self._control_dir = Path(tempfile.mkdtemp(prefix="embedgate-control-"))
        os.chmod(self._control_dir, 0o700)
        self.control_path = str(self._control_dir / CONTROL_SOCKET)
        self.pool: WorkerPool | None = None
        self._jobs: LocalQueue | None = None
        self._state: dict[str, Any] = {}
        self._tasks: list[asyncio.Task] = []

    # --- lifecycle
    async def run(self, sock: socket.socket) -> None:
        """Serve until SIGTERM or SIGINT; ``sock`` holds the port (``reserve_port``)."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await self.host.start(await TritonBackend.started(self.settings, self.triton))
        self.host.registry.on_change = self.publish
        self.host.registry.lost.on_replaced = self._process_replaced
        # The workers take the requests: the memory budget and keep-alive ask them how they use the models.
        self.host.registry.residency.used_elsewhere = self._uses
        settings = self.settings
        coordinator = open_coordinator(settings.model_repository, settings.jobs_state_dir, lease_s=settings.batch_lease_s)
        self._jobs = LocalQueue(coordinator)
        self._state = await self._read_state()
        server = await asyncio.start_unix_server(self._connected, self.control_path, limit=64 << 20)
        self._tasks.append(asyncio.create_task(self._watch_state(), name="triton-state"))
        port = sock.getsockname()[1]
        self.pool = WorkerPool(self.settings, self.workers, port, self.control_path)
        await self.pool.start()
        log.info("serving on %s:%d with %d gateway workers", self.settings.host, port, self.workers)
        try:
            await stop.wait()
        finally:
            log.info("stopping %d gateway workers", self.workers)
            await self.pool.stop()
            server.close()
            for peer in list(self.peers):
                await peer.close()
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self.host.stop_tasks()
            await self.host.stop()
            shutil.rmtree(self._control_dir, ignore_errors=True)

    # --- workers
    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = Peer(reader, writer, {})
        handlers = {
            "hello": functools.partial(self._hello, peer),
            "load_sentence_transformer": functools.partial(self._load_sentence_transformer, peer),
            "load_clip": functools.partial(self._load_clip, peer),
            "unload": self._unload,
            "delete": self._delete,
            "reload_lost": self._reload_lost,
            "jobs": self._call_jobs,
            "gather_metrics": self._gather_metrics,
            "terms": self._terms,
        }
        peer.handlers.update(handlers)
        try:
            await peer.run()
        finally:
            self.peers.pop(peer, None)

    async def _hello(self, peer: Peer, index: int, pid: int) -> dict[str, Any]:
        # Registered before the models are read, with no await between: every change
        # after this answer reaches the worker as a sync of its own.
        self.peers[peer] = index
        triton = self.triton
        log.info("gateway worker %d (pid %d) joined", index, pid)
        return {
            "triton": (triton.url, triton.grpc_url, triton.metrics_url),
            "state": self._state,
            "models": (self.revision, self._models()),
        }

    def _models(self) -> dict[str, int]:
        return {model.name: model.serial for model in self.host.registry.loaded()}

    async def publish(self) -> None:
        """Every worker serves the registry's models now (called by the registry after each
        change); returns once all have taken it, or the slow ones were left behind."""
        self.revision += 1
        revision, models = self.revision, self._models()
        peers = list(self.peers)
        outcomes = await asyncio.gather(
            *(asyncio.wait_for(peer.call("sync", revision, models), SYNC_TIMEOUT_S) for peer in peers),
            return_exceptions=True,
        )
        for peer, outcome in zip(peers, outcomes):
            if isinstance(outcome, BaseException):
                log.error("gateway worker %s did not take the change of models: %r", self.peers.get(peer), outcome)

    def _progress(self, peer: Peer, progress_id: int | None, subject: str) -> Progress:
        progress = Progress(subject)
        if progress_id is not None:
            progress.listen(lambda event: peer.notify("progress", progress_id, event))
        return progress

    async def _load_sentence_transformer(
        self, peer: Peer, name: str, model_path: str | None, *, progress_id: int | None = None, **options: Any
    ) -> tuple[str, bool, bool, int]:
        progress = self._progress(peer, progress_id, name)
        outcome = await self.host.registry.load_sentence_transformer(name, model_path, progress=progress, **options)
        return outcome.model.name, outcome.already_loaded, outcome.converted, self.revision

    async def _load_clip(
        self, peer: Peer, model_name: str, pretrained: str, *, progress_id: int | None = None, **options: Any
    ) -> tuple[str, bool, bool, int]:
        progress = self._progress(peer, progress_id, ModelRef.named(model_name, pretrained).key)
        outcome = await self.host.registry.load_clip(model_name, pretrained, progress=progress, **options)
        return outcome.model.name, outcome.already_loaded, outcome.converted, self.revision

    async def _unload(self, name: str, pretrained: str | None, *, progress_id: int | None = None) -> tuple[int]:
        await self.host.registry.unload(name, pretrained)
        return (self.revision,)

    async def _delete(self, name: str, pretrained: str | None, *, progress_id: int | None = None) -> tuple[int]:
        await self.host.registry.delete(name, pretrained)
        return (self.revision,)

    async def _process_replaced(self, part: str, at: float) -> None:
        for peer in list(self.peers):
            peer.notify("process_replaced", part, at)

    async def _reload_lost(self, key: str, part: str, sent_at: float) -> None:
        await self.host.registry.reload_lost(key, part, sent_at)

    async def _call_jobs(self, name: str, args: tuple, kwargs: dict) -> Any:
        """A worker's call of the coordinator (``PrimaryQueue``)."""
        assert self._jobs is not None
        return await forwarded(self._jobs, name)(*args, **kwargs)

    async def _uses(self) -> Uses:
        """How the workers use the models: in use in any of them, idle as long as the least idle.
        A worker that does not answer is taken to use every model (none is unloaded for it)."""
        peers = list(self.peers)
        answers = await asyncio.gather(
            *(asyncio.wait_for(peer.call("uses"), METRICS_TIMEOUT_S) for peer in peers), return_exceptions=True
        )
        uses: Uses = {}
        for peer, answer in zip(peers, answers):
            if isinstance(answer, BaseException):
                log.warning("gateway worker %s did not say how it uses its models: %r", self.peers.get(peer), answer)
                answer = {model.name: (True, 0.0) for model in self.host.registry.loaded()}
            for name, (in_use, idle_s) in answer.items():
                was_in_use, was_idle_s = uses.get(name, (False, idle_s))
                uses[name] = (was_in_use or in_use, min(was_idle_s, idle_s))
        return uses

    async def _terms(self) -> Listed:
        """What each loaded model's load said (a worker's ``/loaded_models`` lists it)."""
        return self.host.registry.residency.listed()

    async def _gather_metrics(self, asking: int) -> list[bytes]:
        """This process's metrics text (its conversions, its CPU) and every worker's but
        the one asking (which has its own)."""
        others = [peer for peer, index in self.peers.items() if index != asking]
        texts = await asyncio.gather(
            *(asyncio.wait_for(peer.call("own_metrics"), METRICS_TIMEOUT_S) for peer in others),
            return_exceptions=True,
        )
        gathered = [scrape.own_text(None)]
        for peer, text in zip(others, texts):
            if isinstance(text, BaseException):
                log.warning("gateway worker %s did not give its metrics: %r", self.peers.get(peer), text)
            else:
                gathered.append(text)
        return gathered

    # --- Triton's state, told to every worker
    async def _read_state(self) -> dict[str, Any]:
        triton = self.triton
        return {
            "ready": await self.host.backend.ready(),
            "serving": triton.serving,
            "restarts": triton.restarts,
            "triton_pid": triton.pid,
            "restored": not self.host.restoring,
        }

    async def _watch_state(self) -> None:
        while True:
            await asyncio.sleep(STATE_POLL_S)
            try:
                state = await self._read_state()
            except EmbedgateError:
                continue
            if state != self._state:
                self._state = state
                for peer in list(self.peers):
                    peer.notify("state", state)


def serve(settings: Settings, workers: int) -> None:
    """Bind the port, then run the primary until SIGTERM or SIGINT."""
    import uvloop

    sock = reserve_port(settings.host, settings.port)
    try:
        uvloop.run(Primary(settings, workers).run(sock))
    finally:
        sock.close()
