"""An OpenAI embeddings request, checked against its model, and its answer: the same code for
``POST /v1/embeddings`` and for a batch job's ``/v1/embeddings`` lines, so a line's answer
is the route's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...compute.requests.asks import Ask, Options, Output
from ...compute.requests.prompts import PromptChoice
from ...compute.requests.quantize import CALIBRATED, PRECISIONS, Precision, quantize
from ...compute.requests.served import ServedModel
from ...errors import InvalidInput, TooManyInputs
from .schemas import EmbeddingsRequest
from .vectors import encode_rows, shorten

# encoding_format values that are a precision of their own (float and base64 are float32).
QUANTIZED = {name: name for name in PRECISIONS if name != "float32"}


class InvalidParameter(InvalidInput):
    """A bad value for one request parameter; OpenAI's error shape names it in ``param``."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Plan:
    """How a checked request is computed: the precision the service gives, and the
    shortening (then quantizing) done after it."""

    request: EmbeddingsRequest
    model: ServedModel
    precision: Precision
    shortened: bool

    @property
    def service_precision(self) -> Precision:
        return "float32" if self.shortened else self.precision


def check(request: EmbeddingsRequest, model: ServedModel, max_inputs: int) -> Plan:
    """The request, checked against the limits and the model it names (400s and 413 otherwise)."""
    if not request.input:
        raise InvalidParameter("input must be a string or a non-empty list of strings", "input")
    if len(request.input) > max_inputs:
        raise TooManyInputs(f"{len(request.input)} inputs in one request; the limit is {max_inputs}")
    model.kind.require(Output.EMBED, model.name)
    full = model.metadata.embedding_dim
    if request.dimensions is not None and request.dimensions > full:
        raise InvalidParameter(f"dimensions must be at most {full} for model '{model.name}'", "dimensions")
    precision = QUANTIZED.get(request.encoding_format, "float32")
    shortened = request.dimensions is not None and request.dimensions < full
    if shortened and precision in CALIBRATED:
        raise InvalidParameter(
            f"dimensions with {precision}: its ranges are calibrated on the model's full vectors", "dimensions"
        )
    return Plan(request, model, precision, shortened)


def ask(plan: Plan) -> Ask:
    """What a checked request asks of its model: unit-length embeddings (as OpenAI's), each
    input with its input_type's prompt, through its input_type's route."""
    options = Options(normalize=True, precision=plan.service_precision)
    return Ask(Output.EMBED, plan.request.input, PromptChoice(input_type=plan.request.input_type), options)


def answer(plan: Plan, vectors: np.ndarray, token_counts: list[int]) -> dict[str, Any]:
    """The answer's body, from the service's vectors (unit length, in ``plan.service_precision``)."""
    request = plan.request
    if plan.shortened:
        assert request.dimensions is not None
        vectors = quantize(shorten(vectors, request.dimensions), plan.precision)
    # Tokens the model saw, its prompt's included: counted by its own tokenizer, after truncation.
    tokens = sum(token_counts)
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": index, "embedding": row}
            for index, row in enumerate(encode_rows(vectors, request.encoding_format))
        ],
        "model": plan.model.name,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
