"""Triton, embedded (the default: a tritonserver the gateway starts and supervises) or
external (its URLs): ports, timeouts, restarts, the stub's Python and Triton's logging."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field


def _default_work_dir() -> Path:
    return Path.home() / ".cache" / "embedgate"


class TritonSettings(BaseModel):
    triton_url: str | None = Field(
        None,
        description="host:port of an external Triton HTTP endpoint. When set, no "
        "tritonserver is started.",
    )
    triton_grpc_url: str | None = Field(
        None,
        description="host:port of the external Triton's gRPC endpoint, which carries "
        "inference; default <triton_url host>:8001.",
    )
    triton_metrics_url: str | None = Field(
        None,
        description="URL of the external Triton's Prometheus metrics, included in "
        "/metrics/prometheus; default http://<triton_url host>:8002/metrics. The embedded "
        "Triton's is known.",
    )
    triton_work_dir: Path = Field(
        default_factory=_default_work_dir,
        description="Where the embedded tritonserver is unpacked.",
    )
    triton_http_port: int = Field(0, ge=0, le=65535, description="0 picks a free port.")
    triton_grpc_port: int = Field(0, ge=0, le=65535, description="0 picks a free port.")
    triton_metrics_port: int = Field(0, ge=0, le=65535, description="0 picks a free port.")
    triton_startup_timeout_s: float = Field(60.0, gt=0, description="Seconds to wait for Triton to be ready.")
    triton_stub_timeout_s: int = Field(
        300, ge=1, description="Seconds Triton's Python backend waits for a model instance's stub process to "
        "start (its own default, 30, is short on a busy machine: the load fails, Triton aborts, or the handshake "
        "hangs; a stub that does not start at all exits, which Triton sees at once).",
    )
    triton_load_timeout_s: float = Field(
        300.0, gt=0, description="Seconds Triton may take to load a converted model: past it the load is taken for "
        "hung, tritonserver is restarted and the load made once more.",
    )
    triton_stall_poll_s: float = Field(
        10.0, gt=0, description="How often the stubs of a model whose load is pending are looked at: stubs that "
        "use almost no CPU over one look to the next are idle, and a load whose stubs stay idle has hung."
    )
    triton_stall_grace_s: float = Field(
        15.0, ge=0, description="Past the stub timeout (EMBEDGATE_TRITON_STUB_TIMEOUT_S), how long Triton's own "
        "handling of a stub that did not start is waited for before one idle poll ends a pending load."
    )
    triton_exit_timeout_s: int = Field(5, ge=1, description="Triton's --exit-timeout-secs on shutdown.")
    triton_restart_backoff_s: float = Field(
        0.5, ge=0, description="First delay before restarting a Triton that died (doubles on failure)."
    )
    triton_stub_python: Path | None = Field(
        None,
        description="The Python whose environment runs Triton's bundle and models (default: the gateway's own "
        "with numpy<2, else `embedgate triton-runtime`'s); same Python version, numpy<2, nvidia-pytriton.",
    )
    triton_log_verbose: int = Field(0, ge=0, description="Triton's --log-verbose level.")

    @property
    def embedded(self) -> bool:
        return self.triton_url is None
