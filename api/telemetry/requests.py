"""Counting and timing every HTTP request, cheaply.

A pure ASGI middleware (no BaseHTTPMiddleware: no extra task or body copy per request)
that reads the status from the response start and the route template from the scope
after routing. Code deeper down annotates the request it runs for through a per-request
record held in a context variable: the registry names the model once it has found it
loaded (so only known models become labels), the key check names the key (a configured
key's label, never what a client sent), the routes count the inputs, the error handlers
name the error code.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from .metrics import KEY_INPUTS, KEY_REJECTIONS, KEY_REQUESTS, REJECTIONS, REQUEST_SECONDS, REQUESTS

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Requests that matched no route share one label: raw paths would let any client mint series.
UNMATCHED = "unmatched"
REJECTION_STATUSES = frozenset({429, 503})


@dataclass(slots=True)
class RequestRecord:
    model: str = ""
    error_code: str = ""
    key: str = ""
    inputs: int = 0


_current: ContextVar[RequestRecord | None] = ContextVar("embedgate_request", default=None)


def tag_model(name: str) -> None:
    """The request in progress is for ``name``, a model the registry has loaded."""
    record = _current.get()
    if record is not None:
        record.model = name


def tag_key(label: str) -> None:
    """The request in progress comes with the configured key labelled ``label``."""
    record = _current.get()
    if record is not None:
        record.key = label


def count_inputs(count: int) -> None:
    """The request in progress carries ``count`` inputs to a model."""
    record = _current.get()
    if record is not None:
        record.inputs += count


def note_error(code: str) -> None:
    """The request in progress is answered with the error ``code``."""
    record = _current.get()
    if record is not None:
        record.error_code = code


class MetricsMiddleware:
    def __init__(self, app: ASGIApp):
        self.app = app
        # Label children by label values: skips prometheus_client's per-call label checks.
        self._series: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        record = RequestRecord()
        token = _current.set(record)
        started = time.perf_counter()
        status = 500  # what the server answers if the app raises before responding

        async def send_and_watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_watch)
        finally:
            _current.reset(token)
            route = scope.get("route")
            endpoint = getattr(route, "path", None) or UNMATCHED
            self._observe(endpoint, record, status, time.perf_counter() - started)

    def _observe(self, endpoint: str, record: RequestRecord, status: int, seconds: float) -> None:
        key = (endpoint, record.model, status)
        series = self._series.get(key)
        if series is None:
            series = (
                REQUESTS.labels(endpoint, record.model, str(status)),
                REQUEST_SECONDS.labels(endpoint, record.model),
            )
            self._series[key] = series
        counter, histogram = series
        counter.inc()
        histogram.observe(seconds)
        if status in REJECTION_STATUSES:
            REJECTIONS.labels(endpoint, record.model, record.error_code or str(status)).inc()
        if record.key:
            observe_key(record, status)


# Each key's request counter, by key and status (prometheus_client's label checks skipped).
_key_series: dict[tuple[str, int], Any] = {}


def observe_key(record: RequestRecord, status: int) -> None:
    """A request (or gRPC call) with a key, answered ``status``, in the key's metrics."""
    key = record.key
    counter = _key_series.get((key, status))
    if counter is None:
        counter = _key_series[(key, status)] = KEY_REQUESTS.labels(key, str(status))
    counter.inc()
    if status == 200 and record.inputs:
        KEY_INPUTS.labels(key).inc(record.inputs)
    if status in REJECTION_STATUSES:
        KEY_REJECTIONS.labels(key, record.error_code or str(status)).inc()
