"""The fields request bodies share, as the schemas state them: names and patterns, texts,
counts, prompts, and the bounds that are settings.

The JSON schemas say what the server accepts, no more and no less: name patterns
(``patterns.py``), bounds that are settings (marked with :data:`FROM_SETTINGS`, filled
in by ``http/openapi.py`` from the running server's settings), and the rules between
fields. Request bodies are strict (``true`` is a boolean, ``1`` is not), so what the schema
calls invalid the server refuses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema
from pydantic_core import PydanticCustomError

from . import patterns

# In a schema: keywords whose values are settings, e.g. {"maxItems": "max_texts_per_request"};
# http/openapi.py writes the running server's values in.
FROM_SETTINGS = "x-from-settings"


def integral(value: Any) -> Any:
    """JSON Schema's integer includes 7.0; strict mode alone would refuse it."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# A count the schema calls an integer (>= 1): 7 or 7.0, never "7" or 7.5.
Count = Annotated[int, Field(ge=1), BeforeValidator(integral)]


def _one_or_many(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


def texts_not_token_ids(value: Any) -> Any:
    """A string or a list of strings, as a list. OpenAI and TEI also take token ids (lists
    of ints): ids of another tokenizer mean nothing to these models' tokenizers, and these
    routes tokenize texts themselves, so ids are refused rather than misread."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(item, (int, list)) for item in value):
        raise PydanticCustomError(
            "token_ids", "token id arrays are not supported by this server; send the text itself"
        )
    return value


def _one_or_many_schema(limit: str) -> WithJsonSchema:
    """A string, or a list of strings of at most the ``limit`` setting's length."""
    many = {"type": "array", "items": {"type": "string"}, FROM_SETTINGS: {"maxItems": limit}}
    return WithJsonSchema({"anyOf": [{"type": "string"}, many]})


def one_of_these_non_empty(*fields: str) -> list[dict[str, Any]]:
    """JSON schema: at least one of ``fields`` is given, as a string or a non-empty list."""
    non_empty = {"anyOf": [{"type": "string"}, {"type": "array", "minItems": 1}]}
    return [{"required": [field], "properties": {field: non_empty}} for field in fields]


# JSON schema: with a pretrained, the model is a CLIP model, and its model_name an
# architecture (the server refuses 'org/name' with a pretrained).
PRETRAINED_MEANS_CLIP = {
    "if": {"required": ["pretrained"], "properties": {"pretrained": {"type": "string"}}},
    "then": {"properties": {"model_name": {"pattern": patterns.CLIP_ARCHITECTURE}}},
}

Texts = Annotated[list[str], BeforeValidator(_one_or_many), _one_or_many_schema("max_texts_per_request")]


def name_of(pattern: str, description: str | None, example: str, where: Callable[..., Any] = Field) -> Any:
    """A model named in a request: 1 to 200 characters of ``pattern``, in a body (``Field``),
    or, with FastAPI's ``Path`` or ``Form`` as ``where``, in a path or a form."""
    field = where(min_length=1, max_length=200, description=description, examples=[example],
                  json_schema_extra={"pattern": pattern})
    return Annotated[str, field]


ModelName = name_of(
    patterns.MODEL_NAME,
    "'name' or 'org/name' (letters, digits, '.', '_', '-'), optionally '@optimized' or '@int8'.",
    "sentence-transformers/all-MiniLM-L6-v2",
)
ClipArchitecture = name_of(patterns.CLIP_ARCHITECTURE, "OpenCLIP architecture.", "ViT-B-32")
Pretrained = Annotated[
    str,
    Field(
        min_length=1,
        max_length=4096,
        description="OpenCLIP pretrained tag, the absolute path of a checkpoint file on the server, or a hub "
        "repository as open_clip names them ('hf-hub:org/name').",
        examples=["laion2b_s34b_b79k"],
        json_schema_extra={"pattern": patterns.PRETRAINED},
    ),
]
Revision = Annotated[
    str,
    Field(
        min_length=1,
        max_length=200,
        description="A hub revision of the model: a branch, a tag or a commit (default: the hub cache's copy of "
        "main where it has a whole one, else the hub's main). For a model downloaded from the hub only: not with "
        "model_path, nor with an OpenCLIP pretrained other than 'hf-hub:org/name'.",
        examples=["main", "v1.0"],
        json_schema_extra={"pattern": patterns.REVISION},
    ),
]
Images = Annotated[list[str], BeforeValidator(_one_or_many), _one_or_many_schema("max_images_per_request")]
# A prompt's name, as models name them ("query", "search_document", "retrieval.query").
PROMPT_NAME = r"^[A-Za-z0-9_.:-]+$"
PROMPT_MAX_CHARS = 2048
PromptName = Annotated[str, Field(min_length=1, max_length=100, pattern=PROMPT_NAME, examples=["query"])]
PromptText = Annotated[str, Field(max_length=PROMPT_MAX_CHARS, examples=["query: "])]
# JSON schema: a prompt by name or as text, not both (the server answers both with 400).
ONE_PROMPT = {
    "not": {
        "required": ["prompt_name", "prompt"],
        "properties": {"prompt_name": {"type": "string"}, "prompt": {"type": "string"}},
    }
}
AbsolutePath = Annotated[str, Field(max_length=4096, json_schema_extra={"pattern": patterns.ABSOLUTE_PATH})]


class Body(BaseModel):
    """A request body: unknown fields refused, types strict."""

    model_config = ConfigDict(extra="forbid", strict=True, protected_namespaces=())
