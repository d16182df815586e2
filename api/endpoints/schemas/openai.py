"""Bodies of the OpenAI-compatible routes, as OpenAI's API defines them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from ..vectors import EncodingFormat
from . import patterns
from .chunking import CHUNKING_DESCRIPTION, ChunkingField
from .fields import FROM_SETTINGS, Count, name_of, texts_not_token_ids

# An empty list is refused too (400), as are token id arrays.
_INPUT_SCHEMA = {
    "anyOf": [
        {"type": "string"},
        {
            "type": "array",
            "items": {"type": "string"},
            "minItems": 1,
            FROM_SETTINGS: {"maxItems": "max_texts_per_request"},
        },
    ]
}


class EmbeddingsRequest(BaseModel):
    # Unknown parameters are refused (as OpenAI does): a misspelt "dimension" must not be
    # silently ignored. Strict: what the schema calls invalid ("2" for dimensions) is refused.
    model_config = ConfigDict(extra="forbid", strict=True)

    input: Annotated[list[str], BeforeValidator(texts_not_token_ids), WithJsonSchema(_INPUT_SCHEMA)] = Field(
        description="A string or a non-empty list of strings to embed.", examples=[["I am a sentence."]]
    )
    model: name_of(  # type: ignore[valid-type]
        patterns.OPENAI_MODEL,
        "A model name, or a CLIP model as '<model_name>:<pretrained>' (as /v1/models lists it).",
        "sentence-transformers/all-MiniLM-L6-v2",
    )
    encoding_format: EncodingFormat = Field(
        "float",
        description="'float' (numbers) or 'base64' (little-endian float32 bytes), as OpenAI; or integers as "
        "sentence-transformers' quantize_embeddings gives them: 'int8'/'uint8' (a value per dimension, on ranges "
        "calibrated once per model), 'binary'/'ubinary' (a bit per dimension, packed eight to a value).",
    )
    dimensions: Count | None = Field(
        None,
        description="Keep the first N dimensions, then scale back to unit length (at most the model's own).",
    )
    user: str | None = Field(None, max_length=256, description="Accepted and ignored.")
    input_type: Literal["query", "document", "passage"] | None = Field(
        None,
        description="What the inputs are (as NVIDIA NIM and Cohere name it): each input gets the model's prompt "
        "for it, 'query' the model's query prompt, 'document' and 'passage' its document or passage prompt. "
        "Without it, the model's default prompt, if it has one.",
    )
    chunking: ChunkingField | None = Field(
        None,
        description=CHUNKING_DESCRIPTION + " Each chunk is an item of data (index: its place among all the chunks), "
        "with input_index, start, end and tokens beside its embedding. OpenAI's client sends it in extra_body.",
    )


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | list[int] | str
    input_index: int | None = Field(None, description="embedgate, chunked requests: the input the chunk is of.")
    start: int | None = Field(None, description="embedgate, chunked requests: the chunk's first character in it.")
    end: int | None = Field(None, description="embedgate, chunked requests: one past its last character.")
    tokens: int | None = Field(None, description="embedgate, chunked requests: its tokens, without prompt and "
                               "special tokens.")


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
    prompts: dict[str, str] | None = Field(
        None, description="embedgate: the model's prompts (name -> text put before every input); none if not recorded."
    )
    default_prompt_name: str | None = Field(None, description="embedgate: the prompt an input gets by default.")


class ModelsResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[Model]


class OpenAIErrorDetail(BaseModel):
    message: str
    type: Literal["invalid_request_error", "server_error"]
    param: str | None
    code: str


class OpenAIErrorResponse(BaseModel):
    error: OpenAIErrorDetail
