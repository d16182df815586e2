"""The gateway's parts, wired together once and shut down in the right order."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from .compute.embedding import EmbeddingService
from .errors import EmbedgateError
from .jobs.coordinator import Coordinator
from .jobs.files import open_files
from .jobs.queue import JobQueue, LocalQueue
from .jobs.service import JobService
from .jobs.store import JobStore
from .jobs.worker import BatchEndpoint
from .models.registry import ModelControl, ModelRegistry
from .settings import Settings
from .triton.client import TritonClient
from .triton.supervisor import ExternalTriton, TritonSupervisor

log = logging.getLogger("embedgate")
# How often the gateway checks that an external Triton still has the models it serves.
EXTERNAL_CHECK_S = 2.0
JOB_STORE = "jobs.sqlite3"
# What serves a batch job's lines of one URL, made once the gateway's parts exist.
EndpointFactory = Callable[[ModelRegistry, EmbeddingService, Settings], BatchEndpoint]


class Cluster(Protocol):
    """Where the set of loaded models lives when the gateway is one of many replicas
    (the Ray Serve application): loads and unloads go through it, not the manifest; and
    where bulk jobs are coordinated, for every replica's worker."""

    def control(self, registry: ModelRegistry) -> ModelControl: ...

    def job_queue(self, settings: Settings) -> JobQueue: ...


class Gateway:
    def __init__(
        self, settings: Settings, cluster: Cluster | None = None, batch_endpoints: tuple[EndpointFactory, ...] = ()
    ):
        self.settings = settings
        self.cluster = cluster
        self.batch_endpoints = batch_endpoints
        self.triton: TritonSupervisor | ExternalTriton = (
            TritonSupervisor(settings, settings.model_repository)
            if settings.embedded
            else ExternalTriton(settings.triton_url or "", settings.triton_metrics_url, settings.triton_grpc_url)
        )
        self.client: TritonClient
        self.registry: ModelRegistry
        # Loads, unloads and deletes: this gateway's registry, or the cluster's desired state.
        self.models: ModelControl
        self.embeddings: EmbeddingService
        self.jobs: JobService
        self.restoring = True
        self._restore_task: asyncio.Task | None = None
        self._external_watch: asyncio.Task | None = None
        self._external_ready = (0.0, False)

    async def start(self) -> None:
        await self.triton.start()
        self.client = TritonClient(
            self.triton.url,
            self.triton.grpc_url,
            control_timeout_s=self.settings.load_timeout_s,
            load_watch=self.triton.watch_load,
        )
        self.registry = ModelRegistry(self.settings, self.client, self.triton, keep_manifest=self.cluster is None)
        self.embeddings = EmbeddingService(self.settings, self.client, self.triton)
        self.triton.on_restart(self.registry.reload_all)
        if not self.triton.embedded:
            self._external_watch = asyncio.create_task(self._watch_external(), name="external-triton-watch")
        if self.cluster is None:
            self.models = self.registry
            self._restore_task = asyncio.create_task(self._restore(), name="restore-models")
        else:
            # The cluster hands this replica its models (Ray Serve's reconfigure), which
            # ends the restoring (``cluster_models_applied``).
            self.models = self.cluster.control(self.registry)
        self.jobs = self._jobs()
        self.jobs.start()

    def _jobs(self) -> JobService:
        settings = self.settings
        files = open_files(settings.model_repository, settings.jobs_state_dir)
        if self.cluster is not None:
            queue = self.cluster.job_queue(settings)
        else:
            store = JobStore(settings.jobs_state_dir / JOB_STORE)
            queue = LocalQueue(Coordinator(store, files, lease_s=settings.batch_lease_s))
        endpoints = {}
        for make in self.batch_endpoints:
            endpoint = make(self.registry, self.embeddings, settings)
            endpoints[endpoint.url] = endpoint
        return JobService(
            settings, queue, files, endpoints, is_served=self.registry.is_served, ready=lambda: not self.restoring
        )

    async def stop(self) -> None:
        for task in (self._restore_task, self._external_watch):
            if task:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self.jobs.stop()
        # Close keep-alive connections before Triton stops (else it waits, then segfaults).
        await self.client.close()
        self.embeddings.close()
        await self.embeddings.images.close()
        await self.triton.stop()

    def cluster_models_applied(self) -> None:
        """The replica now serves the cluster's models: bulk jobs may lease work here (a
        chunk for a model not loaded yet would fail its batch as unloaded)."""
        self.restoring = False

    async def _restore(self) -> None:
        """Bring back the models that were loaded before a restart, then preloads."""
        names = list(dict.fromkeys(await asyncio.to_thread(self.registry.manifest) + self.settings.preload_models))
        for name in names:
            try:
                await self.registry.restore(name)
            except EmbedgateError as exc:
                log.error("could not restore model %s: %s", name, exc.message)
        self.restoring = False

    async def _watch_external(self) -> None:
        """Nobody here restarts an external Triton, and one that restarts comes back with
        no model loaded: check every few seconds and load again what it lost."""
        while True:
            await asyncio.sleep(EXTERNAL_CHECK_S)
            if self.restoring:
                continue
            try:
                await self.registry.reload_missing()
            except EmbedgateError:
                pass  # unreachable right now: next time

    async def triton_ready(self) -> bool:
        if self.triton.embedded:
            return self.triton.is_ready()
        # External Triton: ask it, at most once a second (health checks stay cheap).
        checked_at, ready = self._external_ready
        if time.monotonic() - checked_at > 1.0:
            ready = await self.client.is_ready()
            self._external_ready = (time.monotonic(), ready)
        return ready

    def saturated(self) -> bool:
        limit = self.settings.max_inflight_requests
        return any(m.inflight >= limit for m in self.registry.loaded())
