"""Sequence classification (NLI, sentiment, toxicity...) in TEI's shape: one text, a pair of
texts, or a batch of either in; each label's score out, best first. The native
``/predict`` gives the scores ``CrossEncoder.predict`` gives (its activation, or the logits
with ``raw_scores``); TEI's ``/predict`` gives TEI's: a softmax over the labels (a sigmoid
for one) unless ``raw_scores``, as TEI computes them."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..compute.requests.asks import Ask, Options, Output, Scores
from ..compute.requests.prompts import PromptChoice
from ..compute.requests.results import Embeddings
from ..compute.requests.served import ServedModel
from ..errors import Empty, InvalidInput, TooManyInputs
from .envelope import Call, Endpoint
from .schemas.predict import PredictRequest
from .schemas.tei import TeiPredictRequest
from .tei import TeiEndpoint


def predictions(labels: list[str], scores: np.ndarray) -> list[dict]:
    """One input's labels and scores, best first (equal scores keep the labels' order)."""
    order = np.argsort(-scores, kind="stable")
    return [{"label": labels[index], "score": float(scores[index])} for index in order]


def answered(call: Call, result: Embeddings) -> Any:
    """Each input's predictions (a batch's as a list, as it came)."""
    rows = [predictions(call.model.kind.labels(), scores) for scores in result.vectors]
    _, batched = call.context.items()
    return rows if batched else rows[0]


class Predict(Endpoint[PredictRequest]):
    """``POST /predict``: scores as ``CrossEncoder.predict`` gives them."""

    def check(self, body: PredictRequest, model: ServedModel | None) -> Call:
        if body.prompt_name is not None and body.prompt is not None:
            raise InvalidInput("give prompt_name or prompt, not both")
        items, _ = body.items()
        limit = self.settings.max_texts_per_request
        if len(items) > limit:
            raise TooManyInputs(f"{len(items)} inputs in one request; the limit is {limit}")
        model = self.model(body.model)
        ask = Ask(
            Output.PREDICT,
            items,
            PromptChoice(prompt_name=body.prompt_name, prompt=body.prompt),
            Options(scores=Scores.RAW if body.raw_scores else Scores.MODEL),
        )
        return Call(model, (ask,), items, context=body)

    def respond(self, call: Call, results: list[Embeddings]) -> Any:
        return answered(call, results[0])


class TeiPredict(TeiEndpoint[TeiPredictRequest]):
    """TEI's ``/predict``: TEI's probabilities unless ``raw_scores``."""

    def check(self, body: TeiPredictRequest, model: ServedModel | None) -> Call:
        assert model is not None
        items, _ = body.items()
        if any(item in ("", ("", "")) for item in items):
            raise Empty("`inputs` cannot be empty")
        self.limit(len(items))
        scores = Scores.RAW if body.raw_scores else Scores.PROBABILITIES
        return Call(model, (Ask(Output.PREDICT, items, options=Options(scores=scores)),), items, context=body)

    def answer(self, call: Call, result: Embeddings) -> Any:
        return answered(call, result)
