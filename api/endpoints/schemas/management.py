"""Bodies of the model management routes: a load (``/load_sentence_transformer_model``,
``/load_clip_model``) and its answer, ``/unload_model`` and ``/delete_model``. Names and
shapes follow the seed API; the fields they share with the inference bodies are in
``fields.py``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from embedgate.contract.sources import ModelSource
from embedgate.contract.spec import variant_model_name

from ...compute.requests.kinds import KINDS
from ...models.names import split_variant
from ...models.source_change import OnSourceChange
from . import patterns
from .fields import PRETRAINED_MEANS_CLIP, AbsolutePath, Body, ClipArchitecture, ModelName, Pretrained, Revision

# What a load does when the repository's copy was converted from another source.
OnSourceChangeField = Annotated[
    OnSourceChange,
    Field(
        description="When the repository's copy of the model was converted from another source than this load "
        "names (another directory or checkpoint, or the same one changed since: its files' fingerprint "
        "differs): 'convert' converts it again and serves the new copy in place of the old (which serves "
        "until then); 'refuse' answers 409 source_changed, naming both, and changes nothing.",
    ),
]
# How long the model stays loaded once idle, and whether the memory budget may unload it.
KeepAliveField = Annotated[
    float | None,
    Field(
        ge=-1,
        description="Seconds the model stays loaded once idle (no request for it in flight), then is unloaded; "
        "-1: for ever; absent: EMBEDGATE_MODEL_KEEP_ALIVE_S (a model already loaded keeps its own).",
    ),
]
PinnedField = Annotated[
    bool | None,
    Field(description="Never unloaded to make room under the memory budget (absent: not pinned, or as it was)."),
]
MADE_FROM_DESCRIPTION = (
    "What the model was converted from: the directory, package, hub snapshot or checkpoint, and a fingerprint "
    "of its files; null for a model converted before sources were recorded (its source is unknown)."
)


class LoadSentenceTransformerRequest(Body):
    # optimize or quantize ask for a variant: model_name must not name one already.
    model_config = ConfigDict(
        json_schema_extra={
            "if": {
                "anyOf": [
                    {"required": ["optimize"], "properties": {"optimize": {"const": True}}},
                    {"required": ["quantize"], "properties": {"quantize": {"const": "int8"}}},
                ]
            },
            "then": {"properties": {"model_name": {"not": {"pattern": patterns.VARIANT_SUFFIX}}}},
        }
    )

    model_name: ModelName
    model_path: AbsolutePath | None = Field(
        None,
        description="Absolute path of a local directory holding the sentence-transformers model. When "
        "absent, model_name is resolved (a local copy when one is installed, the hub cache's, else the hub "
        "if the server allows downloads).",
    )
    revision: Revision | None = None
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
    on_source_change: OnSourceChangeField = "convert"
    keep_alive: KeepAliveField = None
    pinned: PinnedField = None

    @model_validator(mode="after")
    def _one_way_to_name_a_variant(self) -> LoadSentenceTransformerRequest:
        if (self.optimize or self.quantize) and split_variant(self.model_name)[1] is not None:
            raise ValueError("model_name already names a variant: give '<name>@<variant>' or optimize/quantize, not both")
        return self

    def served_name(self) -> str:
        """The model this request loads: model_name, or the variant optimize or quantize ask for."""
        return variant_model_name(self.model_name, "int8" if self.quantize else "optimized" if self.optimize else None)


class ModelRequest(Body):
    model_config = ConfigDict(json_schema_extra=PRETRAINED_MEANS_CLIP)

    model_name: ModelName
    pretrained: Pretrained | None = Field(None, description="A CLIP model's pretrained (CLIP models only).")


class LoadClipRequest(Body):
    model_name: ClipArchitecture
    pretrained: Annotated[Pretrained, Field(json_schema_extra={"pattern": patterns.PRETRAINED_TO_LOAD})]
    revision: Revision | None = None
    on_source_change: OnSourceChangeField = "convert"
    keep_alive: KeepAliveField = None
    pinned: PinnedField = None

    @model_validator(mode="before")
    @classmethod
    def _no_variants(cls, data: Any) -> Any:
        if isinstance(data, dict) and {"optimize", "quantize"} & data.keys():
            raise ValueError("optimize and quantize are for sentence-transformer models; CLIP models are served in float32")
        return data


# The kinds the gateway serves, read from its one registry of them (compute/requests/kinds/).
ModelKindName = Literal[tuple(KINDS)]  # type: ignore[valid-type]
KIND_DESCRIPTION = "What the model computes, as its directory declares it: " + ", ".join(
    f"'{name}' ({kind.title.partition(' (')[2].rstrip(')') or kind.title})" for name, kind in KINDS.items()
) + "."


class LoadResponse(BaseModel):
    model_name: str
    kind: ModelKindName = Field(description=KIND_DESCRIPTION)
    status: Literal["loaded", "already_loaded"]
    converted: bool
    embedding_dim: int = Field(
        description="The output's size: the embedding's dimensions (a sparse encoder's vocabulary), "
        "a cross-encoder's labels (1)."
    )
    max_seq_length: int
    message: str
    variant: str | None = Field(None, description="'optimized' or 'int8' for a variant.")
    parity_min_cosine: float | None = Field(
        None, description="Lowest cosine against the PyTorch model measured before publishing."
    )
    made_from: ModelSource | None = Field(None, description=MADE_FROM_DESCRIPTION)


class LoadClipResponse(LoadResponse):
    pretrained: str
    image_size: list[int] = Field(description="[height, width] of the image tower's input.")


class MessageResponse(BaseModel):
    message: str
