"""Bodies of the OpenAI-compatible routes, as OpenAI's API defines them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

from .vectors import EncodingFormat


def _texts(value: Any) -> Any:
    if isinstance(value, str):
        return [value]
    # OpenAI also takes token ids (lists of ints). Ids of OpenAI's tokenizers mean nothing
    # to these models' tokenizers, so they are refused rather than misread.
    if isinstance(value, list) and value and all(isinstance(item, (int, list)) for item in value):
        raise PydanticCustomError(
            "token_ids", "token id arrays are not supported by this server; send the text itself"
        )
    return value


class EmbeddingsRequest(BaseModel):
    # Unknown parameters are refused (as OpenAI does): a misspelt "dimension" must not be
    # silently ignored.
    model_config = ConfigDict(extra="forbid")

    input: Annotated[list[str], BeforeValidator(_texts)] = Field(
        description="A string or a list of strings to embed.", examples=[["I am a sentence."]]
    )
    model: str = Field(
        min_length=1, max_length=200, examples=["sentence-transformers/all-MiniLM-L6-v2"]
    )
    encoding_format: EncodingFormat = Field(
        "float", description="'float' (numbers) or 'base64' (little-endian float32 bytes)."
    )
    dimensions: int | None = Field(
        None, ge=1, description="Keep the first N dimensions, then scale back to unit length."
    )
    user: str | None = Field(None, max_length=256, description="Accepted and ignored.")


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: Usage


class Model(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class ModelsResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[Model]


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str


class ErrorResponse(BaseModel):
    error: ErrorDetail
