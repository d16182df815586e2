"""The fast lane: the inference routes served without FastAPI's per-request machinery.

FastAPI spends more CPU on a request than the rest of the gateway together: routing scans
every route with regular expressions, dependencies are solved one by one, the body is
parsed to Python objects and then validated. For the routes that hand their body to an
endpoint (``paths.endpoint_route``, TEI's routes), this middleware does the same work
directly: the path looked up in a table, the route's key check called as it is, the body
validated from its bytes by pydantic-core, the endpoint prepared and run, its answer
rendered. The route is the same object (the document, the metrics' label, the code that
answers), so nothing a client can see differs.

Only what succeeds takes the lane. A request that anything refuses before it is charged
(its content type, its key, its body, its model, its limits: everything ``prepare`` checks)
is handed to the application from the start, with its body, and FastAPI answers it as it
always did; a refusal after that (overload, a deadline, Triton) is answered here the way
the application's error handlers answer it (``errors.py``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi.routing import APIRoute
from starlette.requests import Request

from ..errors import EmbedgateError
from .errors import domain_error_response, unexpected_error_response
from .lane import Lane
from .middleware import ASGIApp, Message, Receive, Scope, Send
from .paths import request_timeout
from .responses import answered
from .routing import JSON


@dataclass(frozen=True)
class _Entry:
    route: APIRoute
    lane: Lane


def _lane_routes(routes: list[Any]) -> list[APIRoute]:
    """The application's routes that give the lane an endpoint, in the order the router
    tries them (included routers' routes where they are included)."""
    found = []
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            found += _lane_routes(included.routes)
        elif isinstance(route, APIRoute) and "POST" in route.methods and hasattr(route.endpoint, "lane"):
            found.append(route)
    return found


class FastLane:
    def __init__(
        self, app: ASGIApp, routes: Callable[[], list[Any]], checks: tuple[Callable[[Request], Awaitable[Any]], ...]
    ):
        self.app = app
        self._routes = routes
        # The dependencies the lane's routes are included with that read the request (the key check).
        self.checks = checks
        self._exact: dict[str, _Entry] | None = None
        self._patterns: list[_Entry] = []

    def _table(self) -> dict[str, _Entry]:
        """The lane's routes, in the application's order: by path where the path has no
        parameter, else matched by the route's own pattern."""
        if self._exact is None:
            exact: dict[str, _Entry] = {}
            for route in _lane_routes(self._routes()):
                entry = _Entry(route, route.endpoint.lane)  # type: ignore[attr-defined]
                if route.param_convertors:
                    self._patterns.append(entry)
                else:
                    exact.setdefault(route.path, entry)
            self._exact = exact
        return self._exact

    def _match(self, path: str) -> tuple[_Entry, dict[str, Any]] | None:
        entry = self._table().get(path)
        if entry is not None:
            return entry, {}
        for entry in self._patterns:
            found = entry.route.path_regex.match(path)
            if found is not None:
                return entry, found.groupdict()
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        matched = self._match(scope["path"])
        if matched is None or not _sends_json(scope):
            return await self.app(scope, receive, send)
        entry, params = matched
        try:
            messages = await _read_body(receive)
        except EmbedgateError as error:  # over the body limit (``RequestLimits``)
            return await domain_error_response(scope["path"], error)(scope, receive, send)
        replay = _replaying(messages, receive)
        last = messages[-1]
        body = b"".join(message.get("body", b"") for message in messages) if last["type"] == "http.request" else b""
        request = Request(scope, replay)
        try:
            for check in self.checks:
                await check(request)
            gateway = scope["app"].state.gateway
            timeout_s = await request_timeout(request)
            if not body:
                raise ValueError("no body")
            parsed = entry.lane.body.model_validate_json(body)
            model = entry.lane.model_of(gateway, params) if entry.lane.model_of is not None else None
            endpoint = entry.lane.endpoint_of(gateway.endpoints)
            prepared = endpoint.prepare(parsed, model)
        except Exception:  # noqa: BLE001 - refused before any charge: the application answers it, as always
            return await self.app(scope, replay, send)
        scope["route"] = entry.route  # what the application's router would have set (the metrics' label)
        try:
            response = answered(await endpoint.execute(prepared, timeout_s), request.headers.get("accept"))
        except EmbedgateError as error:
            response = domain_error_response(scope["path"], error)
        except Exception as error:  # noqa: BLE001 - as the application's last handler answers it
            response = unexpected_error_response("POST", scope["path"], error)
        await response(scope, receive, send)


def _sends_json(scope: Scope) -> bool:
    for key, value in scope["headers"]:
        if key == b"content-type":
            content_type = value.decode("latin-1").partition(";")[0].strip().lower()
            return content_type == JSON or content_type.endswith("+json")
    return False


async def _read_body(receive: Receive) -> list[Message]:
    """The request's messages up to the body's end (or the client's going away)."""
    messages = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request" or not message.get("more_body", False):
            return messages


def _replaying(messages: list[Message], receive: Receive) -> Receive:
    """``receive`` for the application: the messages read already, then what comes after."""
    pending = list(reversed(messages))

    async def replay() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replay
