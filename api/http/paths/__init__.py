"""HTTP routes, one module per concern."""

import math
import re
from typing import Annotated

from fastapi import Path, Request

from ...compute.requests.served import ServedModel
from ...errors import InvalidInput, NotReady
from ...gateway import Gateway
from ...models.names import split_clip_key
from ...telemetry import tag_model
from .. import patterns
from ..schemas import FROM_SETTINGS

# Dependencies are coroutines: FastAPI runs a plain ``def`` dependency in its thread pool,
# a thread hop on every request for a few attribute reads.


async def get_gateway(request: Request) -> Gateway:
    gateway = getattr(request.app.state, "gateway", None)
    if gateway is None:
        raise NotReady("the gateway is starting")
    return gateway


def serving(gateway: Gateway, name: str, pretrained: str | None = None) -> ServedModel:
    """The loaded model a request names (404 or 409 otherwise), tagged on the request's
    metrics: a loaded model's name is safe as a label, anything a client sent is not."""
    model = gateway.registry.served(name, pretrained)
    tag_model(model.name)
    return model


# A model named in a path by one string (OpenAI's and TEI's APIs). The name is checked where
# every name is (a 400 or 422 in the route's shape); the pattern documents it.
ModelKey = Annotated[
    str,
    Path(
        min_length=1,
        max_length=200,
        description="A loaded model, or a CLIP model as '<model_name>:<pretrained>'.",
        examples=["sentence-transformers/all-MiniLM-L6-v2"],
        json_schema_extra={"pattern": patterns.OPENAI_MODEL},
    ),
]


def serving_key(gateway: Gateway, key: str) -> ServedModel:
    """:func:`serving` for APIs that name a model with one string (OpenAI's, TEI's): a CLIP
    model is ``<model_name>:<pretrained>``, as ``/v1/models`` lists it."""
    clip = split_clip_key(key)
    return serving(gateway, *clip) if clip else serving(gateway, key)


TIMEOUT_HEADER = "x-request-timeout"
# A decimal number, as the document's "type: number" says (float() alone also takes "1_0", "nan").
_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)

# The header in the OpenAPI document of the routes that take it (``openapi_extra=``). Read
# by hand, not as a FastAPI Header parameter: that costs ~25 us a request on the hot path.
TAKES_A_DEADLINE = {
    "parameters": [
        {
            "name": "X-Request-Timeout",
            "in": "header",
            "required": False,
            "description": "This request's deadline in seconds, instead of the server's (EMBEDGATE_REQUEST_TIMEOUT_S).",
            "schema": {"type": "number", "exclusiveMinimum": 0, FROM_SETTINGS: {"maximum": "max_request_timeout_s"}},
        }
    ]
}


async def request_timeout(request: Request) -> float:
    """The request's deadline in seconds: the setting, or the client's own
    ``X-Request-Timeout`` within ``max_request_timeout_s``."""
    settings = (await get_gateway(request)).settings
    raw = request.headers.get(TIMEOUT_HEADER)
    if raw is None:
        return settings.request_timeout_s
    if not _DECIMAL.fullmatch(raw):
        raise InvalidInput(f"X-Request-Timeout must be a number of seconds, got '{raw[:40]}'")
    value = float(raw)
    if not math.isfinite(value) or value <= 0 or value > settings.max_request_timeout_s:
        raise InvalidInput(
            f"X-Request-Timeout must be between 0 and {settings.max_request_timeout_s:g} seconds"
        )
    return value
