"""The ``chunking`` field of the embedding routes' bodies (``/infer``, ``/v1/embeddings`` and
a batch job's lines of it): long texts cut into chunks of the model's own tokens, each
embedded (``compute/requests/chunking.py``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from ...compute.requests.chunking import Chunking
from .fields import integral

CHUNKING_DESCRIPTION = (
    "embedgate: cut each text into chunks of at most max_tokens of the model's own tokens (its prompt and "
    "special tokens not counted), overlap tokens shared with the chunk before, and embed each chunk: the "
    "answer gives each chunk's vector with its characters [start, end) in the text and its tokens. Dense "
    "embedding models only."
)


class ChunkingField(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    max_tokens: Annotated[int, BeforeValidator(integral)] = Field(
        ge=1, le=65536, description="A chunk's most tokens, at most what the model's max length holds beside its "
        "prompt and special tokens (400 beyond, saying how many)."
    )
    overlap: Annotated[int, BeforeValidator(integral)] = Field(
        0, ge=0, le=65535, description="Tokens each chunk repeats of the one before; less than max_tokens (400 "
        "otherwise)."
    )
    boundary: Literal["token", "whitespace", "sentence"] = Field(
        "token",
        description="Where a chunk may end: after any token; after the last whole word that fits; after the last "
        "sentence that fits (else the last word, else any token). With whitespace or sentence, a chunk starts at "
        "a word where its overlap holds one.",
    )

    late: bool = Field(
        False,
        description="Late chunking: each text runs through the model once (in windows of its max length where "
        "longer), and each chunk's vector is the model's mean pooling over that chunk's tokens, then its modules "
        "after pooling, so that it carries the context of the text around it. Sentence-transformers with mean "
        "pooling whose late-chunking graph the server published (EMBEDGATE_LATE_CHUNKING); 400 otherwise, "
        "saying why. A chunk's tokens are then its tokens in the text.",
    )

    def chunking(self) -> Chunking:
        return Chunking(self.max_tokens, self.overlap, self.boundary, self.late)


class ChunkSpan(BaseModel):
    start: int = Field(description="The chunk's first character in its text.")
    end: int = Field(description="One past its last character: the chunk is text[start:end].")
    tokens: int = Field(
        description="Its tokens, the model's, without prompt and special tokens (late chunks: those it pools, "
        "its tokens in the text)."
    )
