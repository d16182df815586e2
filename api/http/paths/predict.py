"""``POST /predict``: sequence classification (NLI, sentiment, toxicity...), in TEI's shape,
answered by its endpoint (``endpoints/predict.py``): each label's score, best first, as
``CrossEncoder.predict`` gives them (or the logits, with ``raw_scores``)."""

from __future__ import annotations

from fastapi import APIRouter

from ...endpoints.schemas.predict import PredictRequest, PredictResponse
from ...endpoints.timing import documented_headers
from ..openapi import errors
from ..routing import BodyRoute
from . import endpoint_route

router = APIRouter(tags=["predict"], route_class=BodyRoute)
ANSWERS = {
    200: {"headers": documented_headers(text_always=True)},
    **errors(400, 404, 409, 413, 415, 422, 429, 500, 502, 503, 504),
}


endpoint_route(
    router, "/predict", PredictRequest, lambda endpoints: endpoints.predict, name="predict",
    response_model=PredictResponse, responses=ANSWERS,
)
