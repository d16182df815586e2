"""Where replicas report how far they got: a small named Ray actor per application.

Serve can say which replicas run, not what each has loaded. After every
``reconfigure()`` a replica reports the revision it reconciled to, the models it
serves and the loads that failed there; a load or unload waits on these reports.
"""

from __future__ import annotations

from typing import Any

import ray

NAMESPACE = "embedgate"


@ray.remote(num_cpus=0)
class ModelBoard:
    def __init__(self) -> None:
        self._reports: dict[str, dict[str, Any]] = {}

    def report(self, replica_id: str, report: dict[str, Any]) -> None:
        # Reconfigures can finish out of order; a report never goes back a revision.
        previous = self._reports.get(replica_id)
        if previous is None or previous["revision"] <= report["revision"]:
            self._reports[replica_id] = report

    def forget(self, replica_id: str) -> None:
        self._reports.pop(replica_id, None)

    def reports(self) -> dict[str, dict[str, Any]]:
        return dict(self._reports)


def board_for(app_name: str) -> Any:
    """The application's board, created by whichever replica asks first. Detached, so
    that it outlives any one replica."""
    return ModelBoard.options(
        name=f"model-board-{app_name}", namespace=NAMESPACE, lifetime="detached", get_if_exists=True
    ).remote()
