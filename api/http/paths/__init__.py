"""FastAPI's path operations, one module per concern, and what they share: the gateway a
request is served by, a model named in a path, the request's deadline. The routes that hand
their body to an endpoint are declared in ``http/route_table.py``'s terms."""

import math
import re

from fastapi import Path, Request

from ...endpoints.schemas import patterns
from ...endpoints.schemas.fields import FROM_SETTINGS, name_of
from ...errors import InvalidInput, NotReady
from ...gateway import Gateway

# Dependencies are coroutines: FastAPI runs a plain ``def`` dependency in its thread pool,
# a thread hop on every request for a few attribute reads.


async def get_gateway(request: Request) -> Gateway:
    gateway = getattr(request.app.state, "gateway", None)
    if gateway is None:
        raise NotReady("the gateway is starting")
    return gateway


# A model named in a path by one string (OpenAI's and TEI's APIs). The name is checked where
# every name is (a 400 or 422 in the route's shape); the pattern documents it.
ModelKey = name_of(
    patterns.OPENAI_MODEL,
    "A loaded model, or a CLIP model as '<model_name>:<pretrained>'.",
    "sentence-transformers/all-MiniLM-L6-v2",
    Path,
)


TIMEOUT_HEADER = "x-request-timeout"
# The shortest deadline a request may ask for: below it, nothing could answer in time, and
# a deadline nothing can meet is the client's mistake, refused as one (400), not a 504.
MIN_REQUEST_TIMEOUT_S = 0.001
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
            "schema": {
                "type": "number",
                "minimum": MIN_REQUEST_TIMEOUT_S,
                FROM_SETTINGS: {"maximum": "max_request_timeout_s"},
            },
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
    if not math.isfinite(value) or not MIN_REQUEST_TIMEOUT_S <= value <= settings.max_request_timeout_s:
        raise InvalidInput(
            f"X-Request-Timeout must be between {MIN_REQUEST_TIMEOUT_S:g} and {settings.max_request_timeout_s:g} seconds"
        )
    return value

