"""The route class of routes that read a body: the body must come in the content type the
route declares (JSON, or multipart/form-data for uploads), else a 415.

Checked here, after routing, not in a middleware before it: a method the path does not
have is a 405 and an unknown path a 404, whatever the content type.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from ..errors import UnsupportedMediaType

JSON = "application/json"


def _reads(declared: str) -> Callable[[str], bool]:
    """Whether a request's (lowercased, parameterless) content type is one the route reads."""
    if declared == JSON:
        return lambda content_type: content_type == JSON or content_type.endswith("+json")
    return lambda content_type: content_type == declared


class BodyRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler
        declared = getattr(self.body_field.field_info, "media_type", JSON)
        reads = _reads(declared)

        async def checked(request: Request) -> Response:
            sent = request.headers.get("content-type", "")
            content_type = sent.partition(";")[0].strip().lower()
            if not reads(content_type):
                raise UnsupportedMediaType(
                    f"content type '{(content_type or 'none')[:100]}' is not supported; send {declared}"
                )
            return await handler(request)

        return checked
