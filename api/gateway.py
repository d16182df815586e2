"""The gateway's parts, wired together once and shut down in the right order."""

from __future__ import annotations

import logging
from typing import Protocol

from .compute.backend.base import Backend
from .compute.backend.noop import NoopBackend
from .compute.backend.triton import TritonBackend
from .compute.service import EmbeddingService
from .endpoints import Endpoints
from .jobs.checkpoint import open_coordinator
from .jobs.files import open_files
from .jobs.queue import JobQueue, LocalQueue
from .jobs.service import JobService
from .models.control import ModelControl
from .models.first_request import FirstRequestLoads
from .models.host import ModelHost
from .models.memory import gpu_by_part
from .models.registry import ModelRegistry
from .settings import Settings
from .telemetry import scrape
from .triton.server import TritonServer

log = logging.getLogger("embedgate.gateway")


class Cluster(Protocol):
    """Where the set of loaded models lives when the gateway is one of many (a replica of
    the Ray Serve application, or a worker of ``embedgate serve --workers N``): loads and
    unloads go through it, not the manifest; and where bulk jobs are coordinated, for
    every gateway's chunk runner."""

    def triton(self) -> TritonServer | None:
        """The Triton this gateway serves through when another process runs it; None:
        the gateway's own, as the settings say."""
        ...

    def control(self, registry: ModelRegistry) -> ModelControl: ...

    def job_queue(self, settings: Settings) -> JobQueue: ...

    async def attached(self, gateway: Gateway) -> None:
        """The gateway has started with this cluster's registry and control; it serves
        once this returns."""
        ...

    async def gather_metrics(self, own: bytes) -> list[bytes]:
        """The metrics texts of the whole server, this gateway's (``own``) among them."""
        ...


class Gateway:
    def __init__(self, settings: Settings, cluster: Cluster | None = None):
        self.settings = settings
        self.cluster = cluster
        self.host = ModelHost(settings, restore=cluster is None)
        # What runs the models (Triton, or with no-op inference no model at all).
        self.backend: Backend
        self.registry: ModelRegistry
        # Loads, unloads and deletes: this gateway's registry, or the cluster's desired state.
        self.models: ModelControl
        self.embeddings: EmbeddingService
        # What every route and a batch job's lines call.
        self.endpoints: Endpoints
        self.jobs: JobService

    @property
    def restoring(self) -> bool:
        """Models from before a restart (or the cluster's models) are still being loaded."""
        return self.host.restoring

    async def start(self) -> None:
        shared = self.cluster.triton() if self.cluster else None
        triton = await TritonBackend.started(self.settings, shared)
        self.backend = self._backend(triton)
        await self.host.start(self.backend)
        self.registry = self.host.registry
        # With a cluster, it hands this gateway its models (Ray Serve's reconfigure, a
        # worker's primary), which ends the restoring (``cluster_models_applied``).
        self.models = self.registry if self.cluster is None else self.cluster.control(self.registry)
        # A call that met a model's dead process: whoever loads models here loads it again.
        triton.reload_lost = self.models.reload_lost
        self.embeddings = EmbeddingService(self.settings, self.backend)
        # Loads on a request's behalf are made by whoever loads into the Triton this gateway
        # serves through: a worker's primary; a single gateway's, or a Ray replica's, own
        # registry (a replica's budget is its own, the desired state what admins loaded).
        loads_for_requests = self.models if shared is not None else self.registry
        first_requests = (
            FirstRequestLoads(lambda: loads_for_requests, self.registry.residency)
            if self.settings.load_on_first_request else None
        )
        self.endpoints = Endpoints(self.registry, self.embeddings, self.settings, first_requests)
        self.jobs = self._jobs()
        self.jobs.start()
        if self.cluster is not None:
            await self.cluster.attached(self)

    def _backend(self, triton: TritonBackend) -> Backend:
        if self.settings.noop_inference:
            log.warning("no-op inference is on: embeddings are zero vectors and no model runs")
            return NoopBackend(triton)  # models still loaded in Triton, as the server reports them
        return triton

    def _jobs(self) -> JobService:
        settings = self.settings
        files = open_files(settings.model_repository, settings.jobs_state_dir)
        if self.cluster is not None:
            queue = self.cluster.job_queue(settings)
        else:
            coordinator = open_coordinator(settings.model_repository, settings.jobs_state_dir, lease_s=settings.batch_lease_s)
            queue = LocalQueue(coordinator)
        return JobService(
            settings, queue, files, self.endpoints.batch, is_served=self.registry.is_served,
            ready=lambda: not self.restoring,
        )

    async def stop(self) -> None:
        await self.host.stop_tasks()
        await self.jobs.stop()
        self.embeddings.close()
        await self.embeddings.images.close()
        await self.host.stop()

    def cluster_models_applied(self) -> None:
        """The gateway now serves the cluster's models: bulk jobs may lease work here (a
        chunk for a model not loaded yet would fail its batch as unloaded)."""
        self.host.restoring = False

    async def triton_ready(self) -> bool:
        return await self.backend.ready()

    def saturated(self) -> bool:
        limit = self.settings.max_inflight_requests
        return any(m.inflight >= limit for m in self.registry.loaded())

    async def own_metrics(self, *, triton_scraped: bool) -> bytes:
        """This process's metrics and state, in Prometheus's text format."""
        cache = self.embeddings.cache
        residency = self.registry.residency
        memory = await residency.figures()
        state = scrape.GatewayState(
            models=[
                scrape.ModelState(
                    m.name, m.inflight, m.metadata.kind, m.metadata.form, m.cache_hits, m.cache_misses, memory.get(m.name, {})
                )
                for m in self.registry.loaded()
            ],
            inflight_limit=self.settings.max_inflight_requests,
            triton_restarts=self.backend.restarts,
            triton_ready=await self.triton_ready(),
            triton_scraped=triton_scraped,
            cache=None if cache is None else scrape.cache_state(cache.stats()),
            memory_budgets={kind: size for kind, size in residency.budgets.items() if size > 0},
        )
        return scrape.own_text(state)

    async def gpu_memory(self) -> dict[str, int]:
        """GPU memory per Triton model, as the memory budget counts it; empty where no loaded
        model has GPU instances (nothing asked)."""
        return await gpu_by_part(self.backend, self.registry.loaded())

    async def metrics_text(self) -> bytes:
        """One scrape of the whole server: every gateway process's metrics (summed where
        several serve), then Triton's."""
        triton_text = await self.backend.metrics_text()
        own = await self.own_metrics(triton_scraped=triton_text is not None)
        texts = [own] if self.cluster is None else await self.cluster.gather_metrics(own)
        return scrape.merged(texts) + (triton_text or b"")
