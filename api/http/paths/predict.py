"""``POST /predict``: sequence classification (NLI, sentiment, toxicity...), in TEI's shape,
answered by its endpoint (``endpoints/predict.py``): each label's score, best first, as
``CrossEncoder.predict`` gives them (or the logits, with ``raw_scores``)."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from ...endpoints.schemas.predict import PredictRequest, PredictResponse
from ...endpoints.timing import documented_headers
from ...gateway import Gateway
from ..openapi import errors
from ..responses import JSONResponse
from ..routing import BodyRoute
from . import TAKES_A_DEADLINE, get_gateway, request_timeout

router = APIRouter(tags=["predict"], route_class=BodyRoute)
ANSWERS = {
    200: {"headers": documented_headers(text_always=True)},
    **errors(400, 404, 409, 413, 415, 422, 429, 500, 502, 503, 504),
}


@router.post("/predict", response_model=PredictResponse, responses=ANSWERS, openapi_extra=TAKES_A_DEADLINE)
async def predict(
    body: PredictRequest,
    gateway: Gateway = Depends(get_gateway),
    timeout_s: float = Depends(request_timeout),
) -> JSONResponse:
    answer = await gateway.endpoints.predict(body, timeout_s)
    return JSONResponse(answer.body, headers=answer.headers)
