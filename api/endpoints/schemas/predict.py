"""Bodies of ``POST /predict``, in the shape text-embeddings-inference (TEI) gives sequence
classification: one text, a pair of texts, or a batch of either in; each label's score out,
best first."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, model_validator

from . import patterns
from .fields import FROM_SETTINGS, ONE_PROMPT, PromptName, PromptText, name_of
from .rerank import MAX_DOCUMENT_CHARS


def inputs_schema(min_length: int = 0) -> dict[str, Any]:
    """TEI's PredictInput, its texts of at least ``min_length`` characters."""
    text = {"type": "string", "maxLength": MAX_DOCUMENT_CHARS, **({"minLength": min_length} if min_length else {})}
    pair = {"type": "array", "items": text, "minItems": 2, "maxItems": 2, "description": "A pair of texts."}
    one = {"type": "array", "items": text, "minItems": 1, "maxItems": 1, "description": "A single text."}
    return {
        "anyOf": [
            {**text, "description": "A single text."},
            pair,
            {
                "type": "array",
                "items": {"anyOf": [one, pair]},
                "minItems": 1,
                FROM_SETTINGS: {"maxItems": "max_texts_per_request"},
                "description": "A batch of texts ([text]) and pairs ([text, text]).",
            },
        ],
        "description": "A text, a pair of texts, or a batch of texts and pairs (TEI's PredictInput).",
        "examples": ["I love this movie!"],
    }


PredictInputs = Annotated[str | list[str] | list[list[str]], WithJsonSchema(inputs_schema())]


class PredictBody(BaseModel):
    """What /predict and TEI's /predict share: the inputs, in TEI's shapes, and raw_scores."""

    model_config = ConfigDict(extra="forbid", strict=True)

    inputs: PredictInputs
    raw_scores: bool = Field(False, description="The logits as the model gives them, before its activation.")

    @model_validator(mode="after")
    def _shape(self) -> PredictBody:
        inputs = self.inputs
        if isinstance(inputs, list) and not inputs:
            raise ValueError("inputs: a batch holds at least one [text] or [text, text]")
        if isinstance(inputs, list) and isinstance(inputs[0], str) and len(inputs) != 2:
            raise ValueError("inputs: a list of strings is a pair, [text, text]; a batch, of [text] and [text, text]")
        if isinstance(inputs, list) and isinstance(inputs[0], list):
            if any(len(item) not in (1, 2) for item in inputs):
                raise ValueError("inputs: each item of a batch is [text] or [text, text]")
        for text in _texts(inputs):
            if len(text) > MAX_DOCUMENT_CHARS:
                raise ValueError(f"inputs: a text is longer than {MAX_DOCUMENT_CHARS} characters")
        return self

    def items(self) -> tuple[list[str | tuple[str, str]], bool]:
        """The inputs as texts and pairs, and whether they came as a batch."""
        inputs = self.inputs
        if isinstance(inputs, str):
            return [inputs], False
        if inputs and isinstance(inputs[0], str):
            return [(inputs[0], inputs[1])], False
        return [item[0] if len(item) == 1 else (item[0], item[1]) for item in inputs], True  # type: ignore[index]


class PredictRequest(PredictBody):
    model_config = ConfigDict(json_schema_extra=ONE_PROMPT)

    model: name_of(  # type: ignore[valid-type]
        patterns.MODEL_NAME,
        "A loaded cross-encoder (or transformers sequence-classification model).",
        "cross-encoder/nli-deberta-v3-small",
    )
    truncate: Literal[True] = Field(
        True,
        description="Inputs are cut to the model's max_length (longest first for pairs), as the library cuts "
        "them (TEI's option; only true).",
    )
    prompt_name: PromptName | None = Field(
        None,
        description="The model's prompt of this name goes before each input's first text, as predict(prompt_name=...).",
    )
    prompt: PromptText | None = Field(
        None, description="This text goes before each input's first text; not with prompt_name."
    )


def _texts(inputs: Any) -> list[str]:
    if isinstance(inputs, str):
        return [inputs]
    return [text for item in inputs for text in (item if isinstance(item, list) else [item])]


class Prediction(BaseModel):
    label: str = Field(description="The label's name (the model's id2label).", examples=["entailment"])
    score: float = Field(description="Its score, with the model's activation (the logit, with raw_scores).")


# One input: its labels' scores, best first; a batch: a list of those per input.
PredictResponse = list[Prediction] | list[list[Prediction]]
