"""The fast path: the routes that hand their body to an endpoint, served without FastAPI's
per-request machinery.

FastAPI spends more CPU on a request than the rest of the gateway together: routing scans
every route with regular expressions, dependencies are solved one by one, the body is
parsed to Python objects and then validated. For the routes declared as endpoint routes
(``route_table.py``), this middleware does the same work from the same declarations,
directly: the path looked up in a table, the router's key check called as it is, the
deadline read, the body validated from its bytes by pydantic-core, the model found by the
route's own resolver, the endpoint prepared and run, its answer rendered. The route is the
same object (the document, the metrics' label, the code that answers), so nothing a client
can see differs.

Only what succeeds takes the fast path. A request that anything refuses before it is
charged (its content type, its key, its body, its model, its limits: everything ``prepare``
checks) is handed to the application from the start, with its body, and FastAPI answers it
as it always did; a refusal after that (overload, a deadline, Triton) is answered here the
way the application's error handlers answer it (``http/errors.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from fastapi.routing import APIRoute
from starlette.requests import Request

from ..errors import EmbedgateError
from .errors import domain_error_response, unexpected_error_response
from .middleware import ASGIApp, Message, Receive, Scope, Send
from .paths import request_timeout
from .responses import answered
from .route_table import EndpointRoute, EndpointRouter, KeyCheck
from .routing import JSON


@dataclass(frozen=True)
class _Entry:
    declared: EndpointRoute
    route: APIRoute
    check: KeyCheck


def _endpoint_routers(routes: list[Any]) -> Iterator[EndpointRouter]:
    """The routers of endpoint routes the application includes, in the order its router tries them."""
    for route in routes:
        included = getattr(route, "original_router", None)
        if isinstance(included, EndpointRouter):
            yield included
        if included is not None:
            yield from _endpoint_routers(included.routes)


class _Table:
    """The fast path's routes, in the application's order: by path where the path has no
    parameter, else matched by the route's own pattern."""

    def __init__(self, routers: Iterator[EndpointRouter]):
        self.exact: dict[str, _Entry] = {}
        self.patterns: list[_Entry] = []
        for router in routers:
            for declared, route in router.endpoint_routes:
                if not declared.runs_model:
                    continue
                entry = _Entry(declared, route, router.check)
                if route.param_convertors:
                    self.patterns.append(entry)
                else:
                    self.exact.setdefault(route.path, entry)

    def match(self, path: str) -> tuple[_Entry, dict[str, Any]] | None:
        entry = self.exact.get(path)
        if entry is not None:
            return entry, {}
        for entry in self.patterns:
            found = entry.route.path_regex.match(path)
            if found is not None:
                return entry, found.groupdict()
        return None


class FastPath:
    def __init__(self, app: ASGIApp, routes: Callable[[], list[Any]]):
        self.app = app
        self._routes = routes
        self._table: _Table | None = None

    def _match(self, path: str) -> tuple[_Entry, dict[str, Any]] | None:
        if self._table is None:
            self._table = _Table(_endpoint_routers(self._routes()))
        return self._table.match(path)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        matched = self._match(scope["path"])
        if matched is None or not _sends_json(scope):
            return await self.app(scope, receive, send)
        entry, params = matched
        declared = entry.declared
        try:
            messages = await _read_body(receive)
        except EmbedgateError as error:  # over the body limit (``RequestLimits``)
            return await domain_error_response(scope["path"], error)(scope, receive, send)
        replay = _replaying(messages, receive)
        last = messages[-1]
        body = b"".join(message.get("body", b"") for message in messages) if last["type"] == "http.request" else b""
        request = Request(scope, replay)
        try:
            await entry.check(request)
            gateway = scope["app"].state.gateway
            timeout_s = await request_timeout(request)
            if not body:
                raise ValueError("no body")
            parsed = declared.body.model_validate_json(body)
            model = None if declared.model_of is None else await declared.model_of(gateway=gateway, **params)
            endpoint = declared.endpoint_of(gateway.endpoints)
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
