"""``POST /predict``: sequence classification (NLI, sentiment, toxicity...), in TEI's shape.
A cross-encoder scores each text or pair, its activation applied as ``CrossEncoder.predict``
applies it (or not, with ``raw_scores``), and each label's score comes back, best first."""

from __future__ import annotations

import time

import numpy as np
from fastapi import APIRouter, Depends

from ...compute.requests.asks import Ask, Options, Output
from ...compute.requests.prompts import PromptChoice
from ...errors import InvalidInput, TooManyInputs
from ...gateway import Gateway
from ..openai.rate_limits import rate_limit_headers
from ..openapi import errors
from ..predict_schemas import PredictRequest, PredictResponse
from ..responses import JSONResponse
from ..routing import BodyRoute
from ..timing import documented_headers, inference_headers
from . import TAKES_A_DEADLINE, get_gateway, request_timeout, serving

router = APIRouter(tags=["predict"], route_class=BodyRoute)
ANSWERS = {
    200: {"headers": documented_headers(text_always=True)},
    **errors(400, 404, 409, 413, 415, 422, 429, 500, 502, 503, 504),
}


def predictions(labels: list[str], scores: np.ndarray) -> list[dict]:
    """One input's labels and scores, best first (equal scores keep the labels' order)."""
    order = np.argsort(-scores, kind="stable")
    return [{"label": labels[index], "score": float(scores[index])} for index in order]


@router.post("/predict", response_model=PredictResponse, responses=ANSWERS, openapi_extra=TAKES_A_DEADLINE)
async def predict(
    body: PredictRequest,
    gateway: Gateway = Depends(get_gateway),
    timeout_s: float = Depends(request_timeout),
) -> JSONResponse:
    started = time.perf_counter()
    if body.prompt_name is not None and body.prompt is not None:
        raise InvalidInput("give prompt_name or prompt, not both")
    items, batched = body.items()
    limit = gateway.settings.max_texts_per_request
    if len(items) > limit:
        raise TooManyInputs(f"{len(items)} inputs in one request; the limit is {limit}")
    model = serving(gateway, body.model)
    ask = Ask(
        Output.PREDICT,
        items,
        PromptChoice(prompt_name=body.prompt_name, prompt=body.prompt),
        Options(raw_scores=body.raw_scores),
    )
    standing = gateway.embeddings.charge(items)
    result = await gateway.embeddings.answer(model, ask, timeout_s=timeout_s)
    labels = model.kind.labels()
    rows = [predictions(labels, scores) for scores in result.vectors]
    total_ms = (time.perf_counter() - started) * 1000
    headers = inference_headers(model.name, result, total_ms)
    headers.update(rate_limit_headers(standing))
    return JSONResponse(rows if batched else rows[0], headers=headers)
