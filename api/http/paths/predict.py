"""``POST /predict``: sequence classification (NLI, sentiment, toxicity...), in TEI's shape,
answered by its endpoint (``endpoints/predict.py``): each label's score, best first, as
``CrossEncoder.predict`` gives them (or the logits, with ``raw_scores``)."""

from __future__ import annotations

from ...endpoints.schemas.predict import PredictRequest, PredictResponse
from ...endpoints.timing import documented_headers
from ..openapi import errors
from ..route_table import EndpointRoute, EndpointRouter

router = EndpointRouter(tags=["predict"])
ANSWERS = {
    200: {"headers": documented_headers(text_always=True)},
    **errors(400, 404, 409, 413, 415, 422, 429, 500, 502, 503, 504),
}


router.endpoint_route(EndpointRoute("/predict", "predict", PredictRequest, "predict", PredictResponse, ANSWERS))
