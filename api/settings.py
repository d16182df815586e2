"""All settings in one object, read from ``EMBEDGATE_*`` environment variables.

The object is built once (by the CLI or the app factory) and passed down; nothing else
reads the environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


def _default_work_dir() -> Path:
    return Path.home() / ".cache" / "embedgate"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="EMBEDGATE_", extra="ignore")

    # --- gateway HTTP server
    host: str = Field("127.0.0.1", description="Address the gateway listens on.")
    port: int = Field(8686, ge=0, le=65535, description="Port the gateway listens on.")
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="Log level.")

    # --- model repository and conversion
    model_repository: Path = Field(
        Path("model_repository"), description="Directory holding the Triton models."
    )
    triton_form: Literal["python", "onnxruntime"] = Field(
        "python",
        description="Config form for new models: 'python' (Triton Python backend running "
        "onnxruntime; works with the embedded Triton) or 'onnxruntime' (native backend "
        "in NVIDIA's Triton container).",
    )
    allow_hub_download: bool = Field(
        False, description="Let conversions download models from the Hugging Face hub."
    )
    conversion_timeout_s: float = Field(
        1800.0, gt=0, description="Seconds a conversion may take before it is killed."
    )
    parity_threshold: float = Field(
        0.9999, gt=0, le=1, description="Minimum cosine between ONNX and PyTorch embeddings to publish."
    )
    preload_models: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Sentence-transformer models to convert and load at startup.",
    )

    # --- Triton: embedded (default) or external
    triton_url: str | None = Field(
        None,
        description="host:port of an external Triton HTTP endpoint. When set, no "
        "tritonserver is started.",
    )
    triton_work_dir: Path = Field(
        default_factory=_default_work_dir,
        description="Where the embedded tritonserver is unpacked.",
    )
    triton_http_port: int = Field(0, ge=0, le=65535, description="0 picks a free port.")
    triton_grpc_port: int = Field(0, ge=0, le=65535, description="0 picks a free port.")
    triton_metrics_port: int = Field(0, ge=0, le=65535, description="0 picks a free port.")
    triton_startup_timeout_s: float = Field(60.0, gt=0, description="Seconds to wait for Triton to be ready.")
    triton_exit_timeout_s: int = Field(5, ge=1, description="Triton's --exit-timeout-secs on shutdown.")
    triton_restart_backoff_s: float = Field(
        0.5, ge=0, description="First delay before restarting a Triton that died (doubles on failure)."
    )
    triton_log_verbose: int = Field(0, ge=0, description="Triton's --log-verbose level.")

    # --- dynamic batching (written into each new model's config)
    max_batch_size: int = Field(64, ge=1, le=4096, description="Triton max_batch_size of new models.")
    max_queue_delay_us: int = Field(
        2000, ge=0, description="Dynamic batcher: longest wait to fill a batch (microseconds)."
    )
    triton_max_queue_size: int = Field(
        1024, ge=0, description="Requests queued in Triton per model before it rejects (503)."
    )
    instance_count: int = Field(1, ge=1, description="Model instances per model in Triton.")
    instance_kind: Literal["auto", "cpu", "gpu"] = Field(
        "auto", description="Triton instance kind; auto: CPU for 'python', GPU for 'onnxruntime'."
    )
    ort_intra_op_threads: int = Field(0, ge=0, description="0: onnxruntime decides.")

    # --- request handling
    max_inflight_requests: int = Field(
        256, ge=1, description="Requests in flight in the gateway before 503."
    )
    max_texts_per_request: int = Field(2048, ge=1, description="Texts in one request before 413.")
    request_timeout_s: float = Field(30.0, gt=0, description="Deadline for one inference.")
    load_timeout_s: float = Field(600.0, gt=0, description="Deadline for a Triton load.")
    tokenizer_threads: int = Field(2, ge=1, description="Threads that tokenize off the event loop.")

    @field_validator("preload_models", mode="before")
    @classmethod
    def _split_csv(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @property
    def embedded(self) -> bool:
        return self.triton_url is None
