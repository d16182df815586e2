"""HTTP routes, one module per concern."""

from fastapi import Request

from ..errors import ApiError
from ..gateway import Gateway
from ..schemas import ErrorResponse

# Documented error responses shared by the routes (the body is always ErrorResponse).
ERRORS = {code: {"model": ErrorResponse} for code in (400, 404, 409, 413, 422, 502, 503, 504)}


class NotReady(ApiError):
    status, code = 503, "starting"


def get_gateway(request: Request) -> Gateway:
    gateway = getattr(request.app.state, "gateway", None)
    if gateway is None:
        raise NotReady("the gateway is starting")
    return gateway
