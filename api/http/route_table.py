"""The routes whose request goes whole to an endpoint, each declared once.

A declaration (:class:`EndpointRoute`) is the whole route: its path, its body's schema, the
gateway's endpoint that answers it, how its model is found where the path names it (TEI's
base URLs; elsewhere the body names it), and what the document says of its answers. An
:class:`EndpointRouter` is one API's router of them, behind its key check: it makes each
declaration FastAPI's path operation (documented, and answering everything), and keeps the
declarations for the fast path (``fast_path.py``), which serves what it can from the same
declarations without FastAPI's per-request machinery. Both route, validate, check the key
and find the model with what is declared here, so each is written once.
"""

# No ``from __future__ import annotations``: an operation's body is typed by its
# declaration's schema, a local that FastAPI could not resolve from a string.
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel

from ..compute.requests.served import ServedModel
from ..compute.scheduling.tenants import Tenant
from ..endpoints import Endpoints
from ..endpoints.envelope import Endpoint, Unloaded
from ..gateway import Gateway
from ..settings import Settings
from .auth import key_documentation, require_api_key
from .openapi import errors
from .paths import TAKES_A_DEADLINE, get_gateway, request_timeout
from .responses import answered
from .routing import BodyRoute

# The model a path names: a dependency of the path's parameters (by name) and the gateway,
# which FastAPI solves and the fast path calls as ``model_of(gateway=..., **parameters)``.
ModelOf = Callable[..., Awaitable[ServedModel | Unloaded]]
KeyCheck = Callable[[Request], Awaitable[Tenant | None]]


@dataclass(frozen=True)
class EndpointRoute:
    """A POST route that hands its body to an endpoint and answers what the endpoint answers."""

    path: str
    name: str
    body: type[BaseModel]
    # The endpoint, as an attribute of the gateway's ``Endpoints``: "infer", "tei.embed".
    endpoint: str
    # What the document says of its answers: the 200's model, and every status's answer.
    answer: Any
    responses: dict[int | str, dict[str, Any]]
    summary: str | None = None
    # Where the path names the model; None where the body does.
    model_of: ModelOf | None = None
    # Whether a model runs (the fast path may serve it). TEI's /tokenize and /decode run
    # none (nothing charged; their deadline bounds only a load on a first request): FastAPI answers them.
    runs_model: bool = True
    _endpoint_of: Callable[[Endpoints], Endpoint] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_endpoint_of", attrgetter(self.endpoint))

    def endpoint_of(self, endpoints: Endpoints) -> Endpoint:
        return self._endpoint_of(endpoints)


class EndpointRouter(APIRouter):
    """One API's router: its endpoint routes, and whatever other routes it has, all behind
    its key check (``check``, a dependency of every route of it), answering errors in its
    API's shape (``errors``, what the document says of them)."""

    def __init__(self, *, check: KeyCheck = require_api_key, errors: Callable[..., dict] = errors, **router: Any):
        super().__init__(route_class=BodyRoute, dependencies=[Depends(check)], **router)
        self.check = check
        self.errors = errors
        # Each declaration, with the route FastAPI serves it as, in the order they were added.
        self.endpoint_routes: list[tuple[EndpointRoute, APIRoute]] = []

    def endpoint_route(self, route: EndpointRoute) -> None:
        self.add_api_route(
            route.path, _operation(route), methods=["POST"], name=route.name, response_model=route.answer,
            responses=route.responses, summary=route.summary,
            openapi_extra=TAKES_A_DEADLINE,
        )
        self.endpoint_routes.append((route, self.routes[-1]))

    def include_in(self, app: FastAPI, settings: Settings) -> None:
        """Included in ``app`` with what the document says of its key (its routes check it themselves)."""
        app.include_router(self, **key_documentation(settings, documented=self.errors))


async def _named_in_the_body() -> None:
    return None


def _operation(route: EndpointRoute) -> Callable[..., Awaitable[Response]]:
    """FastAPI's path operation for ``route``: its model (where the path names it), then the
    gateway and the deadline, solved as dependencies in that order; its body validated by its
    schema; the endpoint's answer in the form the client accepts."""
    Body = route.body
    model_of = route.model_of or _named_in_the_body

    async def operation(
        http: Request,
        body: Body,  # type: ignore[valid-type]
        model: Annotated[ServedModel | Unloaded | None, Depends(model_of)],
        gateway: Annotated[Gateway, Depends(get_gateway)],
        timeout_s: Annotated[float, Depends(request_timeout)],
    ) -> Response:
        answer = await route.endpoint_of(gateway.endpoints)(body, timeout_s, model)
        return answered(answer, http.headers.get("accept"))

    return operation
