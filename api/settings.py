"""All settings in one object, read from ``EMBEDGATE_*`` environment variables.

The object is built once (by the CLI or the app factory) and passed down; nothing else
reads the environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from embedgate.contract.repository.location import normalize as _repository_location
from embedgate.contract.repository.s3_client import check_supported as _repository_supported

from .key_names import parse_key_names


def _default_work_dir() -> Path:
    return Path.home() / ".cache" / "embedgate"


class Settings(BaseSettings):
    # Errors never repeat a value: some settings are secrets (keys, a URL with credentials).
    model_config = SettingsConfigDict(env_prefix="EMBEDGATE_", extra="ignore", hide_input_in_errors=True)

    # --- gateway HTTP server
    host: str = Field("127.0.0.1", description="Address the gateway listens on.")
    port: int = Field(8686, ge=0, le=65535, description="Port the gateway listens on.")
    workers: int = Field(
        0, ge=0, le=64, description="Gateway processes sharing the port, one Triton and one model lifecycle; 0: one "
        "per four CPU cores on a CPU host (1 on up to 7 cores), one per core up to 8 on a GPU host; 1: one process.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="Log level.")
    opentelemetry: bool = Field(False, description="FastAPI's OpenTelemetry spans and metrics for each request, "
                                "sent to the providers an OpenTelemetry SDK configures (off: Prometheus at "
                                "/metrics/prometheus needs none, and the per-request provider checks cost CPU).")

    # --- model repository and conversion
    model_repository: Annotated[
        str, BeforeValidator(_repository_location), AfterValidator(_repository_supported)
    ] = Field(
        "model_repository",
        description="Where the Triton models are: a directory, or an S3 URL in Triton's syntax: "
        "s3://host:port/bucket/path (an S3-compatible service over HTTP; s3://https://host:port/... "
        "for HTTPS) or s3://bucket/path (Amazon S3). Credentials come from the AWS_* environment "
        "variables, never the URL.",
    )
    repository_cache_dir: Path | None = Field(
        None,
        description="S3 repository: where the gateway keeps its copies of models' metadata and "
        "tokenizers (never the weights) and stages conversions before uploading; default "
        "<triton_work_dir>/repository-cache.",
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
    int8_parity_threshold: float = Field(
        0.99,
        gt=0,
        le=1,
        description="Minimum cosine between an '@int8' variant's embeddings and PyTorch's to publish it.",
    )
    preload_models: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Models to convert and load at startup: sentence-transformer names, "
        "or <model_name>:<pretrained> for OpenCLIP models.",
    )

    # --- Triton: embedded (default) or external
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

    # --- dynamic batching (written into each new model's config)
    max_batch_size: int = Field(256, ge=1, le=4096, description="Triton max_batch_size of new models.")
    sub_batch_size: int = Field(
        64, ge=1, le=4096,
        description="Python form: a dynamic batch's texts, sorted by length, run in sub-batches of at most this many.",
    )
    run_overhead_tokens: float = Field(
        32.0, ge=0, le=100_000,
        description="Python form: the fixed cost of one onnxruntime run, in padded tokens, that decides where "
        "a sorted batch is cut into sub-batches (0: fixed sub-batches of sub_batch_size).",
    )
    pack_width: int = Field(
        48, ge=0, le=4096,
        description="Python form: a dynamic batch whose texts all fit in this many tokens runs through the "
        "model's packed graph, its texts laid end to end in rows this wide (0: never).",
    )
    max_queue_delay_us: int = Field(
        2000, ge=0, description="Dynamic batcher: longest wait to fill a batch (microseconds)."
    )
    triton_max_queue_size: int = Field(1024, ge=0, description="Requests queued in Triton per model before it rejects (503).")
    instance_count: int = Field(
        0, ge=0,
        description="Batches a model runs at once; 0: one per CPU core ('python' on CPU: one Triton instance, "
        "a thread per batch, one copy of the model), 2 ('python' on a GPU: Triton instances), 1 ('onnxruntime').",
    )
    instance_kind: Literal["auto", "cpu", "gpu"] = Field(
        "auto",
        description="Triton instance kind of new models; auto: GPU where the host has an NVIDIA GPU and PyTorch "
        "with CUDA ('python': sentence-transformers models, traced for the GPU at conversion), else CPU; "
        "GPU for 'onnxruntime'.",
    )
    gpu_float16: bool = Field(True, description="GPU instances: publish a sentence-transformer's float16 graph where "
                              "it keeps gpu_half_parity_threshold against the float32 PyTorch model (false: float32 "
                              "graphs only).")
    gpu_cuda_graphs: bool = Field(True, description="GPU instances: capture each model's forward as CUDA graphs "
                                  "of bucketed shapes when it loads (false: eager PyTorch, a launch per operation).")
    gpu_half_parity_threshold: float = Field(0.999, gt=0, le=1, description="GPU instances: the least cosine a "
                                             "float16 graph must keep against PyTorch.")
    ort_intra_op_threads: int = Field(
        0, ge=0, description="onnxruntime threads per instance; 0: cores / instances ('python'), onnxruntime's choice ('onnxruntime')."
    )

    # --- request handling
    max_inflight_requests: int = Field(
        256, ge=1, description="Requests in flight in the gateway before 503."
    )
    max_texts_per_request: int = Field(2048, ge=1, description="Texts in one request before 413.")
    request_timeout_s: float = Field(30.0, gt=0, description="Deadline for one inference.")
    load_timeout_s: float = Field(600.0, gt=0, description="Deadline for a Triton load.")
    tokenizer_threads: int = Field(2, ge=1, description="Threads that tokenize off the event loop.")
    response_cache_mb: float = Field(
        64.0, ge=0, description="Bound of the response cache: the model outputs of inputs seen before, answered "
        "without running the model again (0 turns it off)."
    )
    max_request_timeout_s: float = Field(
        300.0, gt=0, description="Upper bound for a client's own deadline (X-Request-Timeout header)."
    )
    max_request_bytes: int = Field(
        16 * 1024 * 1024, ge=1024, description="Largest request body accepted (413 beyond)."
    )
    tei_model: str | None = Field(
        None, description="The model TEI's API serves at /tei: a loaded model's name ('<name>:<pretrained>' for a "
        "CLIP model); unset: the only loaded model. Every loaded model is also at /tei/<model>.",
    )
    gateway_batching: bool = Field(
        True,
        description="New sentence-transformers in the python form get no Triton dynamic batcher: the gateway "
        "merges their requests, one call running per model instance and one waiting.",
    )
    gateway_calls_in_flight: int = Field(0, ge=0, le=1024, description="Models the gateway batches: merged calls "
                                         "each gateway process keeps in flight per model (0: instances + 1).")
    coalesce_max_texts: int = Field(
        8, ge=0, le=4096,
        description="Requests of at most this many texts are merged with others waiting for the same model "
        "into shared tokenizer and Triton calls (0: never).",
    )
    admission_deadline_share: float = Field(
        0.8, ge=0, le=1,
        description="Admission by cost. Models the gateway batches: a request is refused at once (503, Retry-After) "
        "when its call, after the work queued before it at the model's measured speed, would end past this share of "
        "its deadline, and a waiting request whose call would end past this share of what remains is refused then. "
        "Models Triton batches (CLIP, the native form): a request is refused at once when the work admitted and not "
        "yet answered, with it, at the rate work is answered, would take more than this share of its deadline "
        "(0: admit by count only).",
    )
    spread_min_texts: int = Field(
        8, ge=0, le=4096,
        description="A request of at least twice this many texts, reaching a model (CPU instances, gateway "
        "batching) with idle instances, is cut into one call per idle instance, each of at least this many "
        "texts, run side by side (0: never).",
    )
    coalesce_in_flight: int = Field(
        24, ge=1, le=1024, description="Merged calls in flight per model; requests arriving meanwhile wait and merge."
    )
    bulk_busy_texts: int = Field(
        8, ge=1, le=4096,
        description="Bulk jobs: texts in one Triton call while online requests come and go (an online request "
        "arriving waits at most for a call this small).",
    )
    bulk_idle_texts: int = Field(
        64, ge=1, le=4096, description="Bulk jobs: texts in one Triton call once online requests have been quiet."
    )
    bulk_quiet_s: float = Field(
        0.25, ge=0, description="Bulk jobs: seconds without an online request before bulk calls grow."
    )
    max_concurrent_chunks: int = Field(
        4, ge=1, description="Chunks of one large request sent to Triton at once (fairness to others)."
    )

    # --- measuring the gateway alone
    noop_inference: bool = Field(
        False,
        description="Answer inference with zero vectors right after tokenizing, without calling "
        "Triton: a benchmark then shows the gateway's own cost. Never for real use.",
    )

    # --- who may do what
    api_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated bearer keys; when set, every endpoint but health and docs needs one.",
    )
    admin_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated bearer keys required to load, unload and delete models; accepted "
        "wherever an API key is. Set without API keys, every endpoint but health and docs needs one.",
    )
    key_names: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated name=key pairs naming keys of EMBEDGATE_API_KEYS or EMBEDGATE_ADMIN_KEYS: "
        "per-key metrics show the name (default: key- and 8 hex digits of the key's keyed hash).",
    )
    key_hash_secret: str = Field(
        "",
        description="Secret of the keyed hash (HMAC-SHA256) that bulk-job files and batches record their owner "
        "key by, and unnamed keys' metric labels derive from (empty: a fixed one). Changing it leaves existing "
        "files and batches to admin keys.",
    )
    key_fair_share: bool = Field(
        True, description="With keys: when the server must refuse work, it refuses the keys over their share first."
    )
    key_requests_per_minute: int = Field(0, ge=0, description="Inference requests one key may send per minute "
                                         "before 429 (0: no limit).")
    key_tokens_per_minute: int = Field(0, ge=0, description="Estimated tokens (an image: 1) a key may send to "
                                       "inference a minute before 429 (0: none).")
    allow_trust_remote_code: bool = Field(
        False, description="Let load requests run a model's own code (trust_remote_code)."
    )
    local_model_dirs: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated directories that model_path must lie in (empty: any path).",
    )
    converter_warm_s: float = Field(300.0, ge=0, description="Seconds a warm converter (its libraries imported "
                                    "once, each conversion forked from it) waits for the next; 0: none.")
    conversion_memory_limit_mb: int = Field(0, ge=0, description="Address-space cap of a conversion in MiB (0: none).")

    # --- CLIP models and their images
    clip_model_config_dir: Path | None = Field(
        None,
        description="Directory of extra OpenCLIP model configs (<model_name>.json) that "
        "/load_clip_model can name besides OpenCLIP's own architectures.",
    )
    max_images_per_request: int = Field(64, ge=1, description="Images in one request before 413.")
    image_max_bytes: int = Field(
        10 * 1024 * 1024, ge=1024, description="Largest image accepted, in bytes (fetched, data URI or upload)."
    )
    image_max_pixels: int = Field(
        40_000_000, ge=1, description="Largest image accepted, in pixels, checked before decoding."
    )
    image_fetch_timeout_s: float = Field(
        10.0, gt=0, description="Deadline for fetching one image URL, redirects included."
    )
    image_connect_timeout_s: float = Field(3.0, gt=0, description="Deadline for connecting to an image host.")
    image_max_redirects: int = Field(3, ge=0, description="Redirects followed when fetching an image.")
    image_fetch_allow: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated hosts or networks (CIDR) image URLs may reach although they "
        "are not public (loopback, private...). Empty: public addresses only.",
    )
    image_threads: int = Field(2, ge=1, description="Threads that decode and resize images off the event loop.")

    # --- scale-out: `embedgate serve --ray` (a Ray Serve application of replicas)
    ray_address: str | None = Field(
        None,
        description="Ray cluster `serve --ray` deploys to ('auto', or the head's host:port); "
        "unset: a local Ray is started.",
    )
    ray_dashboard_url: str | None = Field(
        None,
        description="URL of the Ray dashboard, where Serve's config API lives; default: the "
        "cluster's own (port 8265 of its head node).",
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
    ray_proxy_location: Literal["EveryNode", "HeadOnly"] = Field(
        "EveryNode",
        description="Where Serve runs its HTTP proxies: on every node (each prefers the "
        "replicas on its own node) or on the head node only.",
    )
    ray_max_replicas_per_node: int = Field(
        0, ge=0, description="At most this many replicas on one Ray node; 0: no limit."
    )

    # Bulk jobs (OpenAI's Files and Batch APIs).
    jobs_dir: Path | None = Field(
        None,
        description="Where bulk jobs keep their state (SQLite) and, for a local model repository, their files. "
        "Default: .embedgate-jobs in a local repository; for an S3 one, jobs/ in the repository cache "
        "(the files then live in the bucket, under .embedgate-jobs/).",
    )
    batch_max_file_bytes: int = Field(200_000_000, ge=1, description="Largest batch file an upload may be.")
    batch_max_requests: int = Field(50_000, ge=1, description="Most requests (lines) in one batch file.")
    batch_chunk_texts: int = Field(
        512, ge=1, description="Texts in one chunk: the unit a chunk runner leases, runs and records at once."
    )
    batch_lease_s: float = Field(
        60.0, gt=0, description="How long a chunk runner holds a chunk without renewing; a dead one's chunks "
        "are run again after it (at once, for a dead process of the same host)."
    )
    batch_chunks_in_hand: int = Field(2, ge=1, description="Chunks one gateway runs at a time.")
    batch_poll_s: float = Field(1.0, gt=0, description="How often an idle chunk runner looks for work.")

    @field_validator(
        "preload_models", "api_keys", "admin_keys", "key_names", "local_model_dirs", "image_fetch_allow",
        mode="before",
    )
    @classmethod
    def _split_csv(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @model_validator(mode="after")
    def _names_name_keys(self) -> Settings:
        self.key_name_map()
        return self

    def key_name_map(self) -> dict[str, str]:
        """Each named key's name (``EMBEDGATE_KEY_NAMES``), by key."""
        return parse_key_names(self.key_names, set(self.api_keys) | set(self.admin_keys))

    @property
    def repository_cache(self) -> Path:
        """Where the gateway keeps its copies from a remote repository (and stages conversions)."""
        return self.repository_cache_dir or self.triton_work_dir / "repository-cache"

    @property
    def jobs_state_dir(self) -> Path:
        """Where the bulk jobs' SQLite store lives."""
        if self.jobs_dir is not None:
            return self.jobs_dir
        if self.model_repository.startswith("s3://"):
            return self.repository_cache / "jobs"
        return Path(self.model_repository) / ".embedgate-jobs"

    @property
    def embedded(self) -> bool:
        return self.triton_url is None
