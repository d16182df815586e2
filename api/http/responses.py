"""JSON responses serialized with orjson (numpy arrays included, no float round-trip)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import JSONResponse as _StarletteJSONResponse


class JSONResponse(_StarletteJSONResponse):
    # A JSONResponse subclass, not a bare Response: FastAPI documents a route's response
    # model only when the route's response class is one.
    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)
