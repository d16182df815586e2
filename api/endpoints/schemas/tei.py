"""Bodies of the TEI routes, as TEI's OpenAPI document (``docs/openapi.json``, 1.9) defines
them, with the names of its fields and defaults.

Bodies are strict like the rest of the API: an unknown field is refused (TEI ignores it),
so a misspelt option never goes silently unused. The two fields TEI's Python client sends
beyond TEI's own are taken: ``encoding_format`` ("float") from ``feature_extraction`` and an
empty ``parameters`` from ``text_classification``. Token ids as inputs are refused: these
routes tokenize texts themselves.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from ...errors import Empty
from .fields import FROM_SETTINGS, Count, PromptName, integral, texts_not_token_ids
from .predict import PredictBody, inputs_schema
from .rerank import MAX_DOCUMENT_CHARS

# A text TEI takes: not empty (TEI answers "" with 400 Empty, as the route does).
_TEXT = {"type": "string", "minLength": 1}
_TEXTS = {"type": "array", "items": _TEXT, "minItems": 1, FROM_SETTINGS: {"maxItems": "max_texts_per_request"}}
_INPUTS = {"anyOf": [_TEXT, _TEXTS], "description": "A text or a list of texts.", "examples": ["What is Deep Learning"]}
Inputs = Annotated[list[str], BeforeValidator(texts_not_token_ids), WithJsonSchema(_INPUTS)]
# TEI takes both spellings ("Right" in its document, "right" from its Python client).
Direction = Literal["Right", "Left", "right", "left"]


def non_empty(texts: list[str], field: str = "inputs") -> list[str]:
    """``texts``, refused as TEI refuses them (400 Empty) if there are none or one is empty."""
    if not texts or not all(texts):
        raise Empty(f"`{field}` cannot be empty")
    return texts


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Truncation(_Body):
    """TEI's truncation options. Inputs are cut on the right to the model's max length, as
    sentence-transformers cuts them; an input that would have to be cut otherwise is refused."""

    truncate: bool | None = Field(
        None,
        description="Cut inputs longer than the model's max length (the default, null, cuts them, as TEI's "
        "--auto-truncate does); false refuses them (422).",
    )
    truncation_direction: Direction = Field(
        "Right",
        description="Which end is cut: Right, as sentence-transformers cuts. With Left, inputs that fit are "
        "answered and one that would be cut is refused (422): this server cuts only on the right.",
    )

    def refuses_cuts(self) -> str | None:
        """Why an input that had to be cut is refused, or None where cutting it is what was asked."""
        if self.truncate is False:
            return "truncate is false"
        if self.truncation_direction.lower() == "left":
            return "truncation_direction Left asks for the start to be cut, and this server cuts the end"
        return None


class _Prompted(Truncation):
    prompt_name: PromptName | None = Field(
        None,
        description="The model's prompt of this name goes before every text. Without it, the model's "
        "default_prompt_name applies, as in sentence-transformers.",
    )


class TeiEmbedRequest(_Prompted):
    inputs: Inputs
    normalize: bool = Field(True, description="Unit-length embeddings (applied after dimensions).")
    dimensions: Count | None = Field(
        None, description="Keep the first N dimensions (at most the model's own), then normalize if asked."
    )
    encoding_format: Literal["float"] | None = Field(
        None, description="Sent by huggingface_hub's feature_extraction when asked; embeddings come as floats."
    )


class TeiEmbedSparseRequest(_Prompted):
    inputs: Inputs


class TeiEmbedAllRequest(_Prompted):
    inputs: Inputs


class SimilarityInputs(_Body):
    source_sentence: str = Field(examples=["What is Deep Learning?"], json_schema_extra={"minLength": 1})
    sentences: list[str] = Field(
        description="The texts compared with source_sentence.",
        examples=[["What is Machine Learning?"]],
        json_schema_extra={"minItems": 1, "items": _TEXT, FROM_SETTINGS: {"maxItems": "max_texts_per_request"}},
    )


class SimilarityParameters(_Prompted):
    pass


class TeiSimilarityRequest(_Body):
    inputs: SimilarityInputs
    parameters: SimilarityParameters | None = None

    def options(self) -> SimilarityParameters:
        return self.parameters or SimilarityParameters()


class TeiRerankRequest(Truncation):
    query: str = Field(max_length=MAX_DOCUMENT_CHARS, examples=["What is Deep Learning?"])
    texts: list[Annotated[str, Field(max_length=MAX_DOCUMENT_CHARS)]] = Field(
        examples=[["Deep Learning is ..."]],
        json_schema_extra={"minItems": 1, FROM_SETTINGS: {"maxItems": "max_texts_per_request"}},
    )
    raw_scores: bool = Field(False, description="The logits, before the model's activation.")
    return_text: bool = Field(False, description="Give each rank its text.")


class NoParameters(_Body):
    """huggingface_hub's text_classification sends ``"parameters": {}``; its options
    (top_k, function_to_apply) are not TEI's, and are refused."""


class TeiPredictRequest(PredictBody, Truncation):
    # TEI answers an empty text with 400 Empty, as the route does.
    inputs: Annotated[str | list[str] | list[list[str]], WithJsonSchema(inputs_schema(min_length=1))]
    parameters: NoParameters | None = None


class TeiTokenizeRequest(_Body):
    inputs: Inputs
    add_special_tokens: bool = True
    prompt_name: PromptName | None = Field(None, description="As /embed's: the prompt is tokenized with the text.")


# A token id, as the tokenizer takes it (an unsigned 32-bit integer; an id not in its vocabulary decodes to nothing).
MAX_ID = 2**32 - 1
TokenIds = list[Annotated[int, Field(ge=0, le=MAX_ID), BeforeValidator(integral)]]
_IDS = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": MAX_ID}, "minItems": 1}
_IDS_SCHEMA = {"anyOf": [_IDS, {"type": "array", "items": _IDS, "minItems": 1,
                                FROM_SETTINGS: {"maxItems": "max_texts_per_request"}}],
               "description": "Token ids, or a list of those.", "examples": [[101, 7592, 102]]}


class TeiDecodeRequest(_Body):
    # Empty ids are TEI's 400 Empty, as the route answers them.
    ids: Annotated[TokenIds | list[TokenIds], WithJsonSchema(_IDS_SCHEMA)]
    skip_special_tokens: bool = True

    def batch(self) -> tuple[list[list[int]], bool]:
        """The ids as a batch, and whether they came as one."""
        ids = self.ids
        if ids and isinstance(ids[0], list):
            return ids, True  # type: ignore[return-value]
        return [ids], False  # type: ignore[list-item]


class SparseValue(BaseModel):
    index: int
    value: float


class Rank(BaseModel):
    index: int
    score: float
    text: str | None = Field(None, description="With return_text.")


class SimpleToken(BaseModel):
    id: int
    text: str
    special: bool
    start: int | None = Field(None, description="The token's first byte in the (prompted) text; null if special.")
    stop: int | None = Field(None, description="The byte after its last; null if special.")


class ClassifierModel(BaseModel):
    id2label: dict[str, str]
    label2id: dict[str, int]


class EmbeddingModel(BaseModel):
    pooling: str = Field(
        description="'splade' (a sparse encoder), 'none' (a multi-vector model's token vectors), or 'model': the "
        "model's own pooling, inside its graph."
    )


class TeiInfo(BaseModel):
    model_id: str
    model_sha: str | None = None
    model_dtype: str
    served_model_name: str
    model_type: dict[Literal["embedding", "classifier", "reranker"], EmbeddingModel | ClassifierModel]
    max_concurrent_requests: int
    max_input_length: int
    max_batch_tokens: int
    max_batch_requests: int | None = None
    max_client_batch_size: int
    auto_truncate: bool
    tokenization_workers: int
    version: str
    sha: str | None = None
    docker_label: str | None = None


# TEI's error shape, on the TEI routes (its types and statuses: ``http/tei/errors.py``).
ErrorType = Literal["Unhealthy", "Backend", "Overloaded", "Validation", "Tokenizer", "Empty"]


class TeiErrorResponse(BaseModel):
    error: str
    error_type: ErrorType
