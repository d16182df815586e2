"""Request and response bodies. Names and shapes follow the seed API."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field


def _one_or_many(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


Texts = Annotated[list[str], BeforeValidator(_one_or_many)]
ModelName = Annotated[str, Field(min_length=1, max_length=200, examples=["sentence-transformers/all-MiniLM-L6-v2"])]
Pretrained = Annotated[
    str,
    Field(
        min_length=1,
        max_length=4096,
        description="OpenCLIP pretrained tag, or the absolute path of a checkpoint file on the server.",
        examples=["laion2b_s34b_b79k"],
    ),
]
Images = Annotated[list[str], BeforeValidator(_one_or_many)]


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
    trust_remote_code: bool = Field(
        False, description="Run the model's own code; refused unless the server allows it."
    )


class ModelRequest(_Body):
    model_name: ModelName
    pretrained: Pretrained | None = Field(None, description="A CLIP model's pretrained (CLIP models only).")


class LoadClipRequest(_Body):
    model_name: ModelName = Field(description="OpenCLIP architecture.", examples=["ViT-B-32"])
    pretrained: Pretrained


class LoadResponse(BaseModel):
    model_name: str
    status: str = Field(examples=["loaded", "already_loaded"])
    converted: bool
    embedding_dim: int
    max_seq_length: int
    message: str


class LoadClipResponse(LoadResponse):
    pretrained: str
    image_size: list[int] = Field(description="[height, width] of the image tower's input.")


class InferRequest(_Body):
    model_name: ModelName
    pretrained: Pretrained | None = Field(None, description="A CLIP model's pretrained (CLIP models only).")
    text: Texts | None = Field(
        None, description="One string or a list of strings.", examples=[["I am a sentence."]]
    )
    image: Images | None = Field(
        None,
        description="CLIP models: one or more images, each an http(s) URL or a "
        "data:image/...;base64 URI.",
        examples=[["https://example.com/cat.jpg"]],
    )
    normalize: bool = Field(True, description="Return unit-length embeddings.")


class InferResponse(BaseModel):
    text_embeddings: list[list[float]] | None = Field(None, description="When the request had text.")
    image_embeddings: list[list[float]] | None = Field(None, description="When the request had images.")
    processingTimeMs: float


class MessageResponse(BaseModel):
    message: str


class ModelInfo(BaseModel):
    model_name: str
    pretrained: str | None = Field(None, description="CLIP models: their pretrained.")
    triton_name: str
    triton_parts: list[str] = Field(description="The Triton models it is made of (CLIP: text and image towers).")
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
