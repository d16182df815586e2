"""TEI's ``/similarity`` (where huggingface_hub's ``sentence_similarity`` goes): the cosine
of a source sentence's embedding with each of the others'."""

from __future__ import annotations

from typing import Any

from ..compute.requests.asks import Ask, Options, Output
from ..compute.requests.prompts import PromptChoice
from ..compute.requests.results import Embeddings
from ..compute.requests.served import ServedModel
from .envelope import Call
from .schemas.tei import TeiSimilarityRequest, non_empty
from .tei import TeiEndpoint


class TeiSimilarity(TeiEndpoint[TeiSimilarityRequest]):
    def check(self, body: TeiSimilarityRequest, model: ServedModel | None) -> Call:
        assert model is not None
        options = body.options()
        texts = [*non_empty([body.inputs.source_sentence], "inputs.source_sentence"),
                 *non_empty(body.inputs.sentences, "inputs.sentences")]
        self.limit(len(texts) - 1)
        ask = Ask(Output.EMBED, texts, PromptChoice(prompt_name=options.prompt_name), Options(normalize=True))
        # Its truncation options are the parameters'.
        return Call(model, (ask,), texts, context=options)

    def answer(self, call: Call, result: Embeddings) -> Any:
        # The first (unit-length) vector's cosine with each of the others.
        return result.vectors[1:] @ result.vectors[0]
