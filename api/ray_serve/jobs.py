"""Bulk jobs across the replicas: one coordinator for the application, in a Ray actor.

Every replica's chunk runner leases chunks from the same coordinator (``api/jobs/coordinator.py``,
unchanged) through the actor, so a batch created on any replica is run by all of them, and a
replica that dies loses only its leases: the chunks go back to the queue (at once when the
dead process was on the coordinator's host, else when the lease runs out). The actor is
detached and restarted by Ray when it dies; its state is the SQLite store in the jobs
directory beside the model repository (a shared directory, or the coordinator's node for an
S3 repository, whose bucket holds the files every replica reads and a copy of the store,
which a coordinator restarted on another node takes: ``jobs/checkpoint.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ray

from ..jobs.checkpoint import open_coordinator
from ..jobs.queue import ForwardedQueue, forwarded
from ..settings import Settings
from .board import NAMESPACE


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class JobCoordinator:
    def __init__(self, repository: str, state_dir: str, lease_s: float):
        self.coordinator = open_coordinator(repository, Path(state_dir), lease_s=lease_s)

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """A replica's call of the coordinator (``RayQueue``)."""
        return forwarded(self.coordinator, name)(*args, **kwargs)


class RayQueue(ForwardedQueue):
    """A replica's way to the application's coordinator actor."""

    def __init__(self, actor: Any):
        self.actor = actor

    async def _forward(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return await self.actor.call.remote(name, *args, **kwargs)


def job_queue(app_name: str, settings: Settings) -> RayQueue:
    """The application's coordinator, created by whichever replica asks first."""
    actor = JobCoordinator.options(
        name=f"job-coordinator-{app_name}", namespace=NAMESPACE, lifetime="detached", get_if_exists=True
    ).remote(settings.model_repository, str(settings.jobs_state_dir), settings.batch_lease_s)
    return RayQueue(actor)
