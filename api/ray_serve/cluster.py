"""One replica's view of the cluster: it makes its own Triton match the desired state,
reports how that went, and turns the API's loads and unloads into changes of the
desired state that it waits to see on every replica."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..errors import ClusterConfigError, DeadlineExceeded, EmbedgateError, ReplicaLoadFailed, TritonUnavailable
from ..models.control import LoadOutcome
from ..models.names import clip_key, split_clip_key
from ..models.progress import Progress
from ..models.registry import ModelRegistry
from ..settings import Settings
from .board import board_for
from .config_api import ServeConfigApi
from .desired import DesiredModels, adding, removing
from .jobs import RayQueue, job_queue

log = logging.getLogger("embedgate.ray")
POLL_S = 0.2
# Between tries of a load that met this replica's Triton down (its supervisor restarts it).
RETRY_S = 1.0
# Replicas that serve, or are being updated to the new config. One still starting gets
# the new config before its first request, and is not waited for.
SERVING_STATES = frozenset({"RUNNING", "UPDATING", "RECOVERING", "PENDING_MIGRATION"})


class ServeCluster:
    def __init__(
        self, api: ServeConfigApi, replica_id: str, node_ip: str, *, converge_timeout_s: float, board: Any = None
    ):
        self.api = api
        self.replica_id = replica_id
        self.node_ip = node_ip
        self.converge_timeout_s = converge_timeout_s
        self._board = board if board is not None else board_for(api.app_name)
        self._reconciling = asyncio.Lock()

    def triton(self) -> None:
        """Every replica runs its own Triton, as the settings say."""
        return None

    def control(self, registry: ModelRegistry) -> ClusterModels:
        return ClusterModels(registry, self)

    async def attached(self, gateway: Any) -> None:
        """Nothing to do: Serve's ``reconfigure`` hands the replica its models."""

    async def gather_metrics(self, own: bytes) -> list[bytes]:
        """Each replica is scraped on its own (Serve routes a scrape to one of them)."""
        return [own]

    def job_queue(self, settings: Settings) -> RayQueue:
        """Bulk jobs: the application's coordinator actor, shared by every replica."""
        return job_queue(self.api.app_name, settings)

    # --- this replica
    async def reconcile(self, registry: ModelRegistry, desired: DesiredModels) -> None:
        """Load what is wanted and missing, unload what is loaded and not wanted; report."""
        async with self._reconciling:
            failed: dict[str, str] = {}
            loaded = {model.name for model in registry.loaded()}
            for key in desired.models:
                try:
                    if key in loaded:
                        # The replica that took a load from a changed source converted it
                        # again: every other one loads the new copy in place of its old one.
                        await registry.refresh(key)
                    else:
                        await self._restore(registry, key)
                except EmbedgateError as exc:
                    log.error("replica %s could not load %s: %s", self.replica_id, key, exc.message)
                    failed[key] = exc.message
            for key in loaded - set(desired.models):
                clip = split_clip_key(key)
                try:
                    await (registry.unload(*clip) if clip else registry.unload(key))
                except EmbedgateError as exc:
                    log.warning("replica %s could not unload %s: %s", self.replica_id, key, exc.message)
            await self._report(registry, desired.revision, failed)

    async def _restore(self, registry: ModelRegistry, key: str) -> None:
        """Load ``key``; a Triton that dies under the load (or is not up yet) is waited out
        and the load tried again, until the deadline. Else a new replica whose first load
        met a crash would start serving without the model, and no later change would come
        to load it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.converge_timeout_s
        while True:
            try:
                await registry.restore(key)
                return
            except TritonUnavailable as exc:
                if loop.time() + RETRY_S > deadline:
                    raise
                log.warning("replica %s: %s while loading %s; trying again", self.replica_id, exc.message, key)
                await asyncio.sleep(RETRY_S)

    async def _report(self, registry: ModelRegistry, revision: int, failed: dict[str, str]) -> None:
        report = {
            "revision": revision,
            "models": sorted(model.name for model in registry.loaded()),
            "failed": failed,
            "node_ip": self.node_ip,
        }
        await self._board.report.remote(self.replica_id, report)

    async def leave(self) -> None:
        await self._board.forget.remote(self.replica_id)

    # --- every replica
    async def converge(self, key: str, present: bool, revision: int) -> None:
        """Wait until every serving replica has reconciled to ``revision`` (or later) and
        serves ``key`` (or, with ``present`` False, no longer does)."""
        deadline = asyncio.get_running_loop().time() + self.converge_timeout_s
        while True:
            replicas = [replica for replica in await self.api.replicas() if replica.state in SERVING_STATES]
            reports: dict[str, dict[str, Any]] = await self._board.reports.remote()
            waiting = []
            for replica in replicas:
                report = reports.get(replica.replica_id)
                if report is None or report["revision"] < revision:
                    waiting.append(replica)
                elif present and key in report["failed"]:
                    raise ReplicaLoadFailed(
                        f"replica {replica.replica_id} on {replica.node_ip or 'its node'} could not load "
                        f"'{key}': {report['failed'][key]} (the model stays wanted; that replica tries "
                        "again on the next change, or unload it)"
                    )
                elif report["revision"] == revision and (key in report["models"]) != present:
                    waiting.append(replica)
            if replicas and not waiting:
                return
            if asyncio.get_running_loop().time() > deadline:
                names = ", ".join(f"{r.replica_id} ({r.node_ip})" for r in waiting) or "none running"
                action = "load" if present else "unload"
                raise DeadlineExceeded(f"replicas did not {action} '{key}' in time: {names}")
            await asyncio.sleep(POLL_S)


class ClusterModels:
    """The management routes' view in a cluster: a change is made here first (converting
    the model when needed, so errors come back at once), then becomes desired state."""

    def __init__(self, registry: ModelRegistry, cluster: ServeCluster):
        self.registry = registry
        self.cluster = cluster

    async def load_sentence_transformer(self, name: str, model_path: str | None = None, **options: Any) -> LoadOutcome:
        outcome = await self.registry.load_sentence_transformer(name, model_path, **options)
        await self._wanted_everywhere(outcome, options.get("progress"))
        return outcome

    async def load_clip(self, model_name: str, pretrained: str, **options: Any) -> LoadOutcome:
        outcome = await self.registry.load_clip(model_name, pretrained, **options)
        await self._wanted_everywhere(outcome, options.get("progress"))
        return outcome

    async def _wanted_everywhere(self, outcome: LoadOutcome, progress: Progress | None) -> None:
        """The model this replica loaded, made the application's desired state and waited
        for on every replica. Where it cannot become desired state (Serve's config API
        unreachable or refusing), this replica no longer serves what it loaded for the
        request: no replica serves a model the application does not want, and the answer
        (502) says the load did not happen."""
        key = outcome.model.name
        try:
            await self._everywhere(key, True, progress)
        except ClusterConfigError:
            if not outcome.already_loaded:
                clip = split_clip_key(key)
                try:
                    await (self.registry.unload(*clip) if clip else self.registry.unload(key))
                except EmbedgateError as exc:
                    log.warning("replica %s could not unload %s: %s", self.cluster.replica_id, key, exc.message)
            raise

    async def unload(self, name: str, pretrained: str | None = None) -> None:
        key = name if pretrained is None else clip_key(name, pretrained)
        desired = await self.cluster.api.desired()
        if key not in desired.models and key not in {model.name for model in self.registry.loaded()}:
            self.registry.served(name, pretrained)  # raises the 404 or 409 a single gateway would
        await self._everywhere(key, False)

    async def delete(self, name: str, pretrained: str | None = None) -> None:
        key = name if pretrained is None else clip_key(name, pretrained)
        if key in (await self.cluster.api.desired()).models:
            await self._everywhere(key, False)
        await self.registry.delete(name, pretrained)

    async def reload_lost(self, key: str, part: str, sent_at: float) -> None:
        """This replica's Triton lost the model's process: this replica loads it again."""
        await self.registry.reload_lost(key, part, sent_at)

    async def _everywhere(self, key: str, present: bool, progress: Progress | None = None) -> None:
        desired = await self.cluster.api.change_models(adding(key) if present else removing(key))
        if progress is not None:
            progress.step("loading on every replica" if present else "unloading from every replica")
        await self.cluster.converge(key, present, desired.revision)
