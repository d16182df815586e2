"""Request and response bodies. Names and shapes follow the seed API.

The JSON schemas say what the server accepts, no more and no less: name patterns
(``patterns.py``), bounds that are settings (marked with :data:`FROM_SETTINGS`, filled
in by ``openapi.py`` from the running server's settings), and the rules between
fields. Request bodies are strict (``true`` is a boolean, ``1`` is not), so what the schema
calls invalid the server refuses.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, model_validator
from pydantic_core import PydanticCustomError

from embedgate.contract.sources import ModelSource
from embedgate.contract.spec import variant_model_name

from ..compute.requests.kinds import KINDS
from ..compute.requests.quantize import Precision
from ..models.names import split_variant
from ..models.source_change import OnSourceChange
from . import patterns

# In a schema: keywords whose values are settings, e.g. {"maxItems": "max_texts_per_request"};
# openapi.py writes the running server's values in.
FROM_SETTINGS = "x-from-settings"


def integral(value: Any) -> Any:
    """JSON Schema's integer includes 7.0; strict mode alone would refuse it."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# A count the schema calls an integer (>= 1): 7 or 7.0, never "7" or 7.5.
Count = Annotated[int, Field(ge=1), BeforeValidator(integral)]


def _one_or_many(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


def texts_not_token_ids(value: Any) -> Any:
    """A string or a list of strings, as a list. OpenAI and TEI also take token ids (lists
    of ints): ids of another tokenizer mean nothing to these models' tokenizers, and these
    routes tokenize texts themselves, so ids are refused rather than misread."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(item, (int, list)) for item in value):
        raise PydanticCustomError(
            "token_ids", "token id arrays are not supported by this server; send the text itself"
        )
    return value


def _one_or_many_schema(limit: str) -> WithJsonSchema:
    """A string, or a list of strings of at most the ``limit`` setting's length."""
    many = {"type": "array", "items": {"type": "string"}, FROM_SETTINGS: {"maxItems": limit}}
    return WithJsonSchema({"anyOf": [{"type": "string"}, many]})


def one_of_these_non_empty(*fields: str) -> list[dict[str, Any]]:
    """JSON schema: at least one of ``fields`` is given, as a string or a non-empty list."""
    non_empty = {"anyOf": [{"type": "string"}, {"type": "array", "minItems": 1}]}
    return [{"required": [field], "properties": {field: non_empty}} for field in fields]


# JSON schema: with a pretrained, the model is a CLIP model, and its model_name an
# architecture (the server refuses 'org/name' with a pretrained).
PRETRAINED_MEANS_CLIP = {
    "if": {"required": ["pretrained"], "properties": {"pretrained": {"type": "string"}}},
    "then": {"properties": {"model_name": {"pattern": patterns.CLIP_ARCHITECTURE}}},
}
# JSON schema: images need a CLIP model, which /infer names with its pretrained (without
# one, the name is a sentence-transformer's, which has no image tower, or refused).
IMAGES_NEED_PRETRAINED = {
    "if": one_of_these_non_empty("image")[0],
    "then": {"required": ["pretrained"], "properties": {"pretrained": {"type": "string"}}},
}

Texts = Annotated[list[str], BeforeValidator(_one_or_many), _one_or_many_schema("max_texts_per_request")]
ModelName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=200,
        description="'name' or 'org/name' (letters, digits, '.', '_', '-'), optionally '@optimized' or '@int8'.",
        examples=["sentence-transformers/all-MiniLM-L6-v2"],
        json_schema_extra={"pattern": patterns.MODEL_NAME},
    ),
]
ClipArchitecture = Annotated[
    str,
    Field(
        min_length=1,
        max_length=200,
        description="OpenCLIP architecture.",
        examples=["ViT-B-32"],
        json_schema_extra={"pattern": patterns.CLIP_ARCHITECTURE},
    ),
]
Pretrained = Annotated[
    str,
    Field(
        min_length=1,
        max_length=4096,
        description="OpenCLIP pretrained tag, or the absolute path of a checkpoint file on the server.",
        examples=["laion2b_s34b_b79k"],
        json_schema_extra={"pattern": patterns.PRETRAINED},
    ),
]
Images = Annotated[list[str], BeforeValidator(_one_or_many), _one_or_many_schema("max_images_per_request")]
# A prompt's name, as models name them ("query", "search_document", "retrieval.query").
PROMPT_NAME = r"^[A-Za-z0-9_.:-]+$"
PROMPT_MAX_CHARS = 2048
PromptName = Annotated[str, Field(min_length=1, max_length=100, pattern=PROMPT_NAME, examples=["query"])]
PromptText = Annotated[str, Field(max_length=PROMPT_MAX_CHARS, examples=["query: "])]
# JSON schema: a prompt by name or as text, not both (the server answers both with 400).
ONE_PROMPT = {
    "not": {
        "required": ["prompt_name", "prompt"],
        "properties": {"prompt_name": {"type": "string"}, "prompt": {"type": "string"}},
    }
}
AbsolutePath = Annotated[str, Field(max_length=4096, json_schema_extra={"pattern": patterns.ABSOLUTE_PATH})]
# What a load does when the repository's copy was converted from another source.
OnSourceChangeField = Annotated[
    OnSourceChange,
    Field(
        description="When the repository's copy of the model was converted from another source than this load "
        "names (another directory or checkpoint, or the same one changed since: its files' fingerprint "
        "differs): 'convert' converts it again and serves the new copy in place of the old (which serves "
        "until then); 'refuse' answers 409 source_changed, naming both, and changes nothing.",
    ),
]
MADE_FROM_DESCRIPTION = (
    "What the model was converted from: the directory, package, hub snapshot or checkpoint, and a fingerprint "
    "of its files; null for a model converted before sources were recorded (its source is unknown)."
)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, protected_namespaces=())


class LoadSentenceTransformerRequest(_Body):
    # optimize or quantize ask for a variant: model_name must not name one already.
    model_config = ConfigDict(
        json_schema_extra={
            "if": {
                "anyOf": [
                    {"required": ["optimize"], "properties": {"optimize": {"const": True}}},
                    {"required": ["quantize"], "properties": {"quantize": {"const": "int8"}}},
                ]
            },
            "then": {"properties": {"model_name": {"not": {"pattern": patterns.VARIANT_SUFFIX}}}},
        }
    )

    model_name: ModelName
    model_path: AbsolutePath | None = Field(
        None,
        description="Absolute path of a local directory holding the sentence-transformers model. When "
        "absent, model_name is resolved (a local copy when one is installed, else the hub if allowed).",
    )
    trust_remote_code: bool = Field(
        False, description="Run the model's own code; refused unless the server allows it."
    )
    optimize: bool = Field(
        False,
        description="Load '<model_name>@optimized', a model of its own: the float32 graph fused by "
        "onnxruntime's transformer optimizer, held to the same parity threshold.",
    )
    quantize: Literal["int8"] | None = Field(
        None,
        description="'int8': load '<model_name>@int8', a model of its own: dynamic int8 quantization, "
        "refused below EMBEDGATE_INT8_PARITY_THRESHOLD (min cosine against PyTorch). With optimize "
        "too, the model is still '@int8'.",
    )
    on_source_change: OnSourceChangeField = "convert"

    @model_validator(mode="after")
    def _one_way_to_name_a_variant(self) -> LoadSentenceTransformerRequest:
        if (self.optimize or self.quantize) and split_variant(self.model_name)[1] is not None:
            raise ValueError("model_name already names a variant: give '<name>@<variant>' or optimize/quantize, not both")
        return self

    def served_name(self) -> str:
        """The model this request loads: model_name, or the variant optimize or quantize ask for."""
        return variant_model_name(self.model_name, "int8" if self.quantize else "optimized" if self.optimize else None)


class ModelRequest(_Body):
    model_config = ConfigDict(json_schema_extra=PRETRAINED_MEANS_CLIP)

    model_name: ModelName
    pretrained: Pretrained | None = Field(None, description="A CLIP model's pretrained (CLIP models only).")


class LoadClipRequest(_Body):
    model_name: ClipArchitecture
    pretrained: Annotated[Pretrained, Field(json_schema_extra={"pattern": patterns.PRETRAINED_TO_LOAD})]
    on_source_change: OnSourceChangeField = "convert"

    @model_validator(mode="before")
    @classmethod
    def _no_variants(cls, data: Any) -> Any:
        if isinstance(data, dict) and {"optimize", "quantize"} & data.keys():
            raise ValueError("optimize and quantize are for sentence-transformer models; CLIP models are served in float32")
        return data


# The kinds the gateway serves, read from its one registry of them (compute/requests/kinds/).
ModelKindName = Literal[tuple(KINDS)]  # type: ignore[valid-type]
KIND_DESCRIPTION = "What the model computes, as its directory declares it: " + ", ".join(
    f"'{name}' ({kind.title.partition(' (')[2].rstrip(')') or kind.title})" for name, kind in KINDS.items()
) + "."


class LoadResponse(BaseModel):
    model_name: str
    kind: ModelKindName = Field(description=KIND_DESCRIPTION)
    status: Literal["loaded", "already_loaded"]
    converted: bool
    embedding_dim: int = Field(
        description="The output's size: the embedding's dimensions (a sparse encoder's vocabulary), "
        "a cross-encoder's labels (1)."
    )
    max_seq_length: int
    message: str
    variant: str | None = Field(None, description="'optimized' or 'int8' for a variant.")
    parity_min_cosine: float | None = Field(
        None, description="Lowest cosine against the PyTorch model measured before publishing."
    )
    made_from: ModelSource | None = Field(None, description=MADE_FROM_DESCRIPTION)


class LoadClipResponse(LoadResponse):
    pretrained: str
    image_size: list[int] = Field(description="[height, width] of the image tower's input.")


class InferRequest(_Body):
    # Text, images or both; with a pretrained, a CLIP model; images, a CLIP model.
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": one_of_these_non_empty("text", "image"),
            "allOf": [PRETRAINED_MEANS_CLIP, IMAGES_NEED_PRETRAINED, ONE_PROMPT],
        }
    )

    model_name: ModelName
    pretrained: Pretrained | None = Field(None, description="A CLIP model's pretrained (CLIP models only).")
    text: Texts | None = Field(
        None, description="One string or a list of strings.", examples=[["I am a sentence."]]
    )
    image: Images | None = Field(
        None,
        description="CLIP models (name one with its pretrained): one or more images, each an http(s) URL "
        "or a data:image/...;base64 URI.",
        examples=[["https://example.com/cat.jpg"]],
    )
    normalize: bool = Field(True, description="Return unit-length embeddings.")
    prompt_name: PromptName | None = Field(
        None,
        description="The model's prompt of this name (GET /loaded_models lists them) goes before every text, as "
        "sentence-transformers' encode(prompt_name=...). Without prompt_name or prompt, the model's "
        "default_prompt_name applies.",
    )
    prompt: PromptText | None = Field(
        None,
        description="This text goes before every text, as encode(prompt=...); \"\" for no prompt, not even the "
        "default. Not with prompt_name.",
    )
    precision: Precision = Field(
        "float32",
        description="Dense embeddings in this precision, as sentence-transformers' quantize_embeddings gives them: "
        "'int8'/'uint8' (a byte per dimension, on ranges calibrated once per model at conversion; text only), "
        "'binary'/'ubinary' (a bit per dimension, packed eight to a value). Not for sparse encoders.",
    )
    top_k: Count | None = Field(
        None,
        description="Sparse encoders: keep each text's top_k largest weights (encode(max_active_dims=top_k)); "
        "without it, the model's own max_active_dims, or all non-zero weights.",
    )
    task: Literal["query", "document"] | None = Field(
        None,
        description="What the texts are, as sentence-transformers' encode_query and encode_document set it: the "
        "route a model whose modules differ by task takes them through (without it, the task prompt_name "
        "stands for, if it is 'query', 'document', 'passage' or 'corpus'; else the model's default route), and "
        "the task's prompt where no prompt is given.",
    )


class SparseEmbedding(BaseModel):
    indices: list[int] = Field(description="Vocabulary ids with a non-zero weight, ascending.")
    values: list[float] = Field(description="Their weights.")


class InferResponse(BaseModel):
    text_embeddings: list[list[float]] | list[list[int]] | None = Field(
        None, description="When the request had text (dense models): floats, or integers in a lower precision."
    )
    sparse_embeddings: list[SparseEmbedding] | None = Field(
        None, description="When the request had text and the model is a sparse encoder: each text's non-zero weights."
    )
    multi_vector_embeddings: list[list[list[float]]] | None = Field(
        None,
        description="When the request had text and the model is a multi-vector model: each text's vectors, one "
        "per token it keeps (its task's markers and query expansion included, its skiplist's tokens left out).",
    )
    image_embeddings: list[list[float]] | list[list[int]] | None = Field(None, description="When the request had images.")
    processingTimeMs: float


class MessageResponse(BaseModel):
    message: str


class ErrorDetail(BaseModel):
    status: int
    code: str
    message: str


class ErrorResponse(BaseModel):
    error: ErrorDetail


class NotReadyResponse(ErrorResponse):
    status: Literal["unavailable", "starting", "busy"] | None = Field(
        None, description="Why not (absent while the gateway itself is starting)."
    )


class LiveResponse(BaseModel):
    status: Literal["live"]


class ReadyResponse(BaseModel):
    status: Literal["ready"]


class StageTime(BaseModel):
    count: int
    ns: int


class BatchStats(BaseModel):
    # Triton's per-batch-size times (compute_input, compute_infer, compute_output: StageTime).
    model_config = ConfigDict(extra="allow")

    batch_size: int


class ModelStats(BaseModel):
    name: str = Field(description="The model's name (a CLIP part: its CLIP model's).")
    triton_name: str
    version: str
    last_inference: int = Field(description="Milliseconds since the epoch; 0 before the first.")
    inference_count: int
    execution_count: int
    average_batch_size: float = Field(description="inference_count / execution_count: Triton's average batch.")
    inference_stats: dict[str, StageTime] = Field(description="Triton's cumulative times per stage.")
    batch_stats: list[BatchStats]
    pretrained: str | None = Field(None, description="CLIP parts: the model's pretrained.")
    part: Literal["text_encoder", "image_encoder"] | None = Field(None, description="CLIP parts: which tower.")


class ResponseCacheStats(BaseModel):
    max_bytes: int = Field(description="The bound (EMBEDGATE_RESPONSE_CACHE_MB).")
    bytes: int
    entries: int = Field(description="Inputs whose model output is held.")
    hits: int = Field(description="Inputs answered from the cache, since the gateway started.")
    misses: int = Field(description="Inputs the model ran for, since the gateway started.")
    evictions: int = Field(description="Outputs dropped to stay within the bound.")


class MetricsResponse(BaseModel):
    model_stats: list[ModelStats]
    response_cache: ResponseCacheStats | None = Field(None, description="The response cache; null when it is off.")
