"""The parts of metadata.json (``spec.ModelMetadata``): parity results, the GPU graph, and
what each kind records of its own (a cross-encoder's labels, a sparse encoder's top-k, a
multi-vector model's tasks, a Router's routes, an OpenCLIP model's tokenizer and image
preprocessing). Torch-free, as the contract is: the serving path imports it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Discriminator, Field, Tag

# Variants, as spec.py names them (spec.py imports this module).
Variant = Literal["optimized", "int8"]


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


class ImageParityResult(BaseModel):
    passed: bool
    threshold: float
    min_cosine: float
    images: int


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
    # A text graph's (sentences), or a CLIP image tower's (images).
    parity: ParityResult | ImageParityResult


class CrossEncoderInfo(BaseModel):
    """A cross-encoder's graph: texts or (query, document) pairs in, ``num_labels`` values
    out: the logits (``logits``), to which the gateway applies the activation
    ``CrossEncoder.predict`` applies, or, for models converted before that and activations
    the gateway does not apply, the scores with the activation already inside."""

    num_labels: int = Field(ge=1)
    # The activation's class (torch.nn.Sigmoid for one label, unless the model names another).
    activation: str
    # The graph takes token_type_ids (BERT-style pairs: 0 for the query, 1 for the document).
    token_type_ids: bool
    # The graph's output is LOGITS (True) or SCORES (False: converted before, or an activation
    # the gateway does not apply; such a model gives no raw scores).
    logits: bool = False
    # Each label's name, by index (the model's id2label; "LABEL_<i>" where it names none).
    labels: list[str] = Field(default_factory=list)


class SparseInfo(BaseModel):
    """A sparse encoder's graph: a weight for every token of the vocabulary (most zero)."""

    # The model's own cap on non-zero weights per text (encode's default top-k); None: all.
    max_active_dims: int | None = None
    pooling: str
    activation: str


RouteTask = Literal["query", "document", "default"]


class RouteInfo(BaseModel):
    """One route of a model whose modules differ by task (a ``Router``): the tasks that take
    it (``encode_query``'s "query", ``encode_document``'s "document", and "default" for
    ``encode`` without one), what runs it, and how its texts are tokenized. The first route's
    files (tokenizer) are the model's own; the others' in ``routes/<index>/``."""

    name: str
    tasks: list[RouteTask]
    # Its Triton model version (the graph in <model>/<version>/); None: computed in the
    # gateway from its static weights (STATIC_WEIGHTS_FILE, inference-free sparse queries).
    version: int | None
    max_seq_length: int
    do_lower_case: bool = False
    strip_whitespace: bool = False
    # False where the route tokenizes without the model's special tokens (SparseStaticEmbedding).
    add_special_tokens: bool = True
    parity: ParityResult


class QueryExpansion(BaseModel):
    """ColBERT's query expansion: a query is padded to ``length`` tokens (strategy "fixed"
    also cuts it there; "min" only pads) with ``token_id``, which the encoder attends to only
    where ``attend``, and every one of those positions is scored."""

    strategy: Literal["fixed", "min"]
    attend: bool
    token_id: int
    length: int = Field(ge=1)


class MultiVectorTask(BaseModel):
    """How a multi-vector model tokenizes and scores the texts of one task."""

    max_length: int = Field(ge=1)
    expansion: QueryExpansion | None = None
    # Token ids whose vectors are left out (MultiVectorMask's skiplist, for its tasks).
    skiplist: list[int] = Field(default_factory=list)
    # Where set, only these token ids' vectors are kept (MultiVectorMask's keep_only_token_ids).
    keep_only: list[int] | None = None


class MultiVectorInfo(BaseModel):
    """A multi-vector (late-interaction) model: its graph gives a vector per token; which
    tokens a text keeps and how a query is expanded depend on the task, as
    ``MultiVectorEncoder.encode_query`` / ``encode_document`` / ``encode`` apply them."""

    similarity: Literal["maxsim", "meanmaxsim"]
    query: MultiVectorTask
    document: MultiVectorTask
    default: MultiVectorTask


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


class ClipMetadata(BaseModel):
    pretrained: str
    text: AnyClipText
    image: ImagePreprocessing
    image_parity: ImageParityResult
    # GPU instances: the image tower's TorchScript graph (the text tower's is ModelMetadata.gpu).
    image_gpu: GpuInfo | None = None
