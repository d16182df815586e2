"""Request and response bodies. Names and shapes follow the seed API."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field


def _one_or_many(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


Texts = Annotated[list[str], BeforeValidator(_one_or_many)]
ModelName = Annotated[str, Field(min_length=1, max_length=200, examples=["sentence-transformers/all-MiniLM-L6-v2"])]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())


class LoadSentenceTransformerRequest(_Body):
    model_name: ModelName
    model_path: str | None = Field(
        None,
        max_length=4096,
        description="Local directory holding the sentence-transformers model. When absent, "
        "model_name is resolved (a local copy when one is installed, else the hub if allowed).",
    )


class ModelRequest(_Body):
    model_name: ModelName


class LoadResponse(BaseModel):
    model_name: str
    status: str = Field(examples=["loaded", "already_loaded"])
    converted: bool
    embedding_dim: int
    max_seq_length: int
    message: str


class InferRequest(_Body):
    model_name: ModelName
    text: Texts | None = Field(
        None, description="One string or a list of strings.", examples=[["I am a sentence."]]
    )
    normalize: bool = Field(True, description="Return unit-length embeddings.")


class InferResponse(BaseModel):
    text_embeddings: list[list[float]]
    processingTimeMs: float


class MessageResponse(BaseModel):
    message: str


class ModelInfo(BaseModel):
    model_name: str
    triton_name: str
    kind: str
    embedding_dim: int
    max_seq_length: int
    normalized: bool
    form: str
    source: str
    loaded: bool


class ModelList(BaseModel):
    models: list[ModelInfo]


class ErrorDetail(BaseModel):
    status: int
    code: str
    message: str


class ErrorResponse(BaseModel):
    error: ErrorDetail
