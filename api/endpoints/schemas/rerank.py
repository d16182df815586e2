"""Bodies of ``POST /rerank`` and ``POST /v1/rerank``, in the shape rerank APIs share (Cohere's
and Jina's clients read it): a query and documents in; each document's index and
relevance score out, best first, with its text where asked."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from . import patterns
from .fields import FROM_SETTINGS, Count, PromptName, PromptText, name_of

MAX_DOCUMENT_CHARS = 1_000_000


class Document(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    text: str = Field(max_length=MAX_DOCUMENT_CHARS)


def _texts(value: Any) -> Any:
    """Documents as strings, or as ``{"text": ...}`` objects (Jina's and Cohere's v1 form)."""
    if isinstance(value, list):
        return [Document.model_validate(item).text if isinstance(item, dict) else item for item in value]
    return value


_DOCUMENTS_SCHEMA = {
    "type": "array",
    "items": {"anyOf": [{"type": "string", "maxLength": MAX_DOCUMENT_CHARS}, Document.model_json_schema()]},
    "minItems": 1,
    FROM_SETTINGS: {"maxItems": "max_texts_per_request"},
}


class RerankRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "not": {
                "required": ["prompt_name", "prompt"],
                "properties": {"prompt_name": {"type": "string"}, "prompt": {"type": "string"}},
            }
        },
    )

    model: name_of(  # type: ignore[valid-type]
        patterns.MODEL_NAME,
        "A loaded cross-encoder (one label), or a multi-vector model (scored by MaxSim).",
        "cross-encoder/ms-marco-MiniLM-L6-v2",
    )
    query: str = Field(max_length=MAX_DOCUMENT_CHARS, examples=["What is the capital of France?"])
    documents: Annotated[list[str], BeforeValidator(_texts), WithJsonSchema(_DOCUMENTS_SCHEMA)] = Field(
        description="The documents to score against the query: strings, or {\"text\": ...} objects.",
        examples=[["Paris is the capital of France.", "Berlin is in Germany."]],
    )
    top_n: Count | None = Field(
        None, description="Return only the top_n best documents (all when absent)."
    )
    return_documents: bool = Field(False, description="Give each result its document's text.")
    prompt_name: PromptName | None = Field(
        None, description="The model's prompt of this name goes before the query, as CrossEncoder.predict(prompt_name=...)."
    )
    prompt: PromptText | None = Field(None, description="This text goes before the query; not with prompt_name.")


class RerankedDocument(BaseModel):
    text: str


class RerankResult(BaseModel):
    index: int = Field(description="The document's position in the request.")
    relevance_score: float = Field(
        description="The model's score for the pair, as CrossEncoder.predict gives it (a multi-vector model's MaxSim)."
    )
    document: RerankedDocument | None = Field(None, description="With return_documents.")


class RerankUsage(BaseModel):
    total_tokens: int = Field(description="Tokens of every (query, document) pair the model saw, after truncation.")


class RerankResponse(BaseModel):
    model: str
    results: list[RerankResult] = Field(description="Best first.")
    usage: RerankUsage
