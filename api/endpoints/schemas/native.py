"""Bodies of ``POST /infer`` and ``/infer_image``, in the seed API's shape: texts (and, for a
CLIP or multimodal model, images) in; each kind's embeddings under its own key out."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ...compute.requests.quantize import Precision
from .chunking import CHUNKING_DESCRIPTION, ChunkingField, ChunkSpan
from .fields import (
    ONE_PROMPT,
    PRETRAINED_MEANS_CLIP,
    Body,
    Count,
    Images,
    ModelName,
    Pretrained,
    PromptName,
    PromptText,
    Texts,
    one_of_these_non_empty,
)


class InferRequest(Body):
    # Text, images or both; with a pretrained, a CLIP model; images, a CLIP or multimodal model.
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": one_of_these_non_empty("text", "image"),
            "allOf": [PRETRAINED_MEANS_CLIP, ONE_PROMPT],
        }
    )

    model_name: ModelName
    pretrained: Pretrained | None = Field(None, description="A CLIP model's pretrained (CLIP models only).")
    text: Texts | None = Field(
        None, description="One string or a list of strings.", examples=[["I am a sentence."]]
    )
    image: Images | None = Field(
        None,
        description="CLIP models (named with their pretrained) and multimodal sentence-transformers: one or more "
        "images, each an http(s) URL or a data:image/...;base64 URI.",
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
    chunking: ChunkingField | None = Field(
        None, description=CHUNKING_DESCRIPTION + " The answer's text_chunks gives each text's chunks, in order."
    )


class SparseEmbedding(BaseModel):
    indices: list[int] = Field(description="Vocabulary ids with a non-zero weight, ascending.")
    values: list[float] = Field(description="Their weights.")


class TextChunk(ChunkSpan):
    embedding: list[float] | list[int] = Field(description="The chunk's embedding, as text_embeddings gives one.")


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
    text_chunks: list[list[TextChunk]] | None = Field(
        None, description="When the request asked for chunking (instead of text_embeddings): each text's chunks."
    )
    processingTimeMs: float

