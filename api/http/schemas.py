"""Request and response bodies. Names and shapes follow the seed API."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from embedgate.converters.spec import variant_model_name

from ..models.names import split_variant


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

    @model_validator(mode="after")
    def _one_way_to_name_a_variant(self) -> LoadSentenceTransformerRequest:
        if (self.optimize or self.quantize) and split_variant(self.model_name)[1] is not None:
            raise ValueError("model_name already names a variant: give '<name>@<variant>' or optimize/quantize, not both")
        return self

    def served_name(self) -> str:
        """The model this request loads: model_name, or the variant optimize or quantize ask for."""
        return variant_model_name(self.model_name, "int8" if self.quantize else "optimized" if self.optimize else None)


class ModelRequest(_Body):
    model_name: ModelName
    pretrained: Pretrained | None = Field(None, description="A CLIP model's pretrained (CLIP models only).")


class LoadClipRequest(_Body):
    model_name: ModelName = Field(description="OpenCLIP architecture.", examples=["ViT-B-32"])
    pretrained: Pretrained

    @model_validator(mode="before")
    @classmethod
    def _no_variants(cls, data: Any) -> Any:
        if isinstance(data, dict) and {"optimize", "quantize"} & data.keys():
            raise ValueError("optimize and quantize are for sentence-transformer models; CLIP models are served in float32")
        return data


class LoadResponse(BaseModel):
    model_name: str
    status: str = Field(examples=["loaded", "already_loaded"])
    converted: bool
    embedding_dim: int
    max_seq_length: int
    message: str
    variant: str | None = Field(None, description="'optimized' or 'int8' for a variant.")
    parity_min_cosine: float | None = Field(
        None, description="Lowest cosine against the PyTorch model measured before publishing."
    )


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
    variant: str | None = Field(None, description="'optimized' or 'int8' for a variant (named '<model>@<variant>').")
    parity_min_cosine: float | None = Field(
        None, description="Lowest cosine against the PyTorch model on the parity sentences, measured before publishing."
    )
    parity_mean_cosine: float | None = Field(
        None, description="Mean of the same cosines (none for models converted before it was recorded)."
    )


class ModelList(BaseModel):
    models: list[ModelInfo]


class ErrorDetail(BaseModel):
    status: int
    code: str
    message: str


class ErrorResponse(BaseModel):
    error: ErrorDetail
