"""The model listings' bodies (``GET /loaded_models``, ``/repository_models``): the fields
every model has, and those of each kind, which its type declares
(``compute/requests/kinds/<kind>.py``'s ``listing_fields``), so a new kind's fields need no
change here."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, create_model

from embedgate.contract.sources import ModelSource

from ...compute.requests.kinds import KINDS
from .management import KIND_DESCRIPTION, MADE_FROM_DESCRIPTION, ModelKindName


class RouteListing(BaseModel):
    name: str
    tasks: list[Literal["query", "document", "default"]]
    runs_on: Literal["triton", "gateway"]


class _ModelInfo(BaseModel):
    model_name: str
    triton_name: str
    triton_parts: list[str] = Field(
        description="The Triton models it is made of (CLIP: text and image towers; none for a static embedding "
        "model, which the gateway computes)."
    )
    kind: ModelKindName = Field(description=KIND_DESCRIPTION)
    embedding_dim: int
    max_seq_length: int
    normalized: bool
    form: str
    source: str
    made_from: ModelSource | None = Field(None, description=MADE_FROM_DESCRIPTION)
    loaded: bool
    variant: str | None = Field(None, description="'optimized' or 'int8' for a variant (named '<model>@<variant>').")
    parity_min_cosine: float | None = Field(
        None, description="Lowest cosine against the PyTorch model on the parity sentences, measured before publishing."
    )
    parity_mean_cosine: float | None = Field(
        None, description="Mean of the same cosines (none for models converted before it was recorded)."
    )
    gpu_dtype: Literal["float16", "float32"] | None = Field(
        None, description="The precision of the graph GPU instances run (none: CPU instances)."
    )
    gpu_parity_min_cosine: float | None = Field(
        None, description="Lowest cosine of the GPU graph against the float32 PyTorch model, measured on the GPU."
    )
    gpu_memory_bytes: int | None = Field(
        None,
        description="GPU memory the model's GPU instances hold (CUDA contexts, weights, CUDA graphs, buffers), "
        "as the GPU reports their processes', else as they report it (/loaded_models only; none: CPU instances).",
    )
    memory_bytes: int | None = Field(
        None,
        description="Host memory the model holds: the resident memory of its Triton instances' processes, read "
        "now (/loaded_models only; none where Triton runs elsewhere).",
    )
    pinned: bool | None = Field(None, description="Never unloaded by the memory budget (/loaded_models only).")
    keep_alive_s: float | None = Field(
        None, description="Seconds it stays loaded once idle; -1: for ever (/loaded_models only)."
    )
    prompts: dict[str, str] | None = Field(
        None,
        description="The model's prompts (name -> text put before every text), as sentence-transformers holds "
        "them; none for models converted before they were recorded.",
    )
    default_prompt_name: str | None = Field(None, description="The prompt a request gets when it names none.")
    prompts_refused: str | None = Field(None, description="Why requests may not use a prompt with this model, if so.")
    routes: list[RouteListing] | None = Field(
        None,
        description="A model whose modules differ by task (a Router), or a static embedding model (one route, "
        "named ''): each route and the tasks that take it ('default': a request that names none); where it runs "
        "('triton', or 'gateway' for static weights).",
    )


# The listing of a model: the fields every model has, and those of each kind (its type
# declares them: compute/requests/kinds/<kind>.py's listing_fields).
ModelInfo = create_model(
    "ModelInfo",
    __base__=_ModelInfo,
    **{name: field for kind in KINDS.values() for name, field in kind.listing_fields.items()},
)


class ModelList(BaseModel):
    models: list[ModelInfo]
