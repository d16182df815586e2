"""Scale-out with `embedgate serve --ray`: the Ray cluster and dashboard, and the Ray Serve
application's replicas (count, autoscaling, load per replica, CPUs, proxies, placement)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class ScaleOutSettings(BaseModel):
    ray_address: str | None = Field(
        None,
        description="Ray cluster `serve --ray` deploys to ('auto', or the head's host:port); "
        "unset: a local Ray is started.",
    )
    ray_dashboard_url: str | None = Field(
        None,
        description="URL of the Ray dashboard, where Serve's config API lives; default: the one the "
        "cluster reports to `serve --ray`, passed on to every replica (a replica with none looks on port "
        "8265 of its head node).",
    )
    ray_replicas: int = Field(
        2, ge=1, description="Replicas, each a gateway with its own tritonserver (the minimum when autoscaling)."
    )
    ray_max_replicas: int = Field(
        0, ge=0, description="Autoscale between ray_replicas and this many replicas; 0: a fixed count."
    )
    ray_target_ongoing_requests: float = Field(
        64, gt=0, description="Autoscaling aims at this many requests in progress per replica."
    )
    ray_max_ongoing_requests: int = Field(
        256,
        ge=1,
        description="Requests Serve hands one replica at once: high, so Triton's dynamic "
        "batcher still sees full batches.",
    )
    ray_replica_cpus: float = Field(1.0, gt=0, description="CPUs Ray reserves for each replica.")
    ray_health_check_period_s: float = Field(
        5.0, gt=0, description="How often Serve checks each replica (its Triton answering, for at most "
        "EMBEDGATE_TRITON_STARTUP_TIMEOUT_S unready); three failed checks in a row replace the replica."
    )
    ray_proxy_location: Literal["EveryNode", "HeadOnly"] = Field(
        "EveryNode",
        description="Where Serve runs its HTTP proxies: on every node (each prefers the "
        "replicas on its own node) or on the head node only.",
    )
    ray_max_replicas_per_node: int = Field(
        0, ge=0, description="At most this many replicas on one Ray node; 0: no limit."
    )
