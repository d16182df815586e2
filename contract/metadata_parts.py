"""The parts of metadata.json (``spec.ModelMetadata``) that models of several kinds have:
parity results, the GPU graph, a Router's routes, int8/uint8 ranges, a variant's graph.
What a kind records of its own is in its module (``contract/kinds/<kind>.py``). Torch-free,
as the contract is: the serving path imports it.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, Field

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


RouteTask = Literal["default", "query", "document"]
# Every task a route may take, as metadata.json names them: ``encode`` without one, then
# ``encode_query``'s and ``encode_document``'s; the converter and the gateway read this.
ROUTE_TASKS: tuple[RouteTask, ...] = get_args(RouteTask)


class RouteInfo(BaseModel):
    """One route of a model whose modules differ by task (a ``Router``): the tasks that take
    it (``encode_query``'s "query", ``encode_document``'s "document", and "default" for
    ``encode`` without one), what runs it, and how its texts are tokenized. The first route's
    files (tokenizer) are the model's own; the others' in ``routes/<index>/``. A model the
    gateway computes whole (a static embedding model) has one, named "", for every task."""

    name: str
    tasks: list[RouteTask]
    # Its Triton model version (the graph in <model>/<version>/); None: computed in the
    # gateway from its static weights (STATIC_WEIGHTS_FILE: inference-free sparse queries,
    # static embedding models).
    version: int | None
    max_seq_length: int
    do_lower_case: bool = False
    strip_whitespace: bool = False
    # False where the route tokenizes without the model's special tokens (static weights).
    add_special_tokens: bool = True
    # Computed in the gateway: its vectors scaled to unit length after the static weights
    # (a Normalize module after a StaticEmbedding).
    normalized: bool = False
    parity: ParityResult


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
