"""Counting and timing every gRPC call (TEI's gRPC API), beside the HTTP requests: the same
per-request record (``requests.py``) is set for the call, so the registry's ``tag_model``
and the key check's ``tag_key`` name its model and key as they do for HTTP; the call's
status code, from a fixed set, is its label. A call with a key counts in the key's
metrics as the HTTP request would (the status TEI's HTTP route answers its error with)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .metrics import RPC_MESSAGES, RPC_SECONDS, RPCS
from .requests import RequestRecord, _current, observe_key

# A call the client cancelled, in the keys' metrics (what HTTP servers log for a client gone).
CLIENT_CLOSED = 499


class RpcRecord:
    """One call in progress: what it is answered with (``code``, and ``status``, the HTTP
    status of the same answer) and how many messages of a stream were answered."""

    __slots__ = ("record", "code", "status", "messages")

    def __init__(self) -> None:
        self.record = RequestRecord()
        self.code = "OK"
        self.status = 200
        self.messages = 0


_series: dict[tuple[str, str, str], tuple[Any, Any]] = {}


@contextmanager
def observed_rpc(method: str) -> Iterator[RpcRecord]:
    """The call of ``method`` (``/tei.v1.Embed/Embed``) in progress, counted and timed when it ends."""
    rpc = RpcRecord()
    token = _current.set(rpc.record)
    started = time.perf_counter()
    try:
        yield rpc
    finally:
        _current.reset(token)
        model = rpc.record.model
        series = _series.get((method, model, rpc.code))
        if series is None:
            series = _series[(method, model, rpc.code)] = (RPCS.labels(method, model, rpc.code),
                                                           RPC_SECONDS.labels(method, model))
        series[0].inc()
        series[1].observe(time.perf_counter() - started)
        if rpc.messages:
            RPC_MESSAGES.labels(method, model).inc(rpc.messages)
        if rpc.record.key:
            observe_key(rpc.record, rpc.status)
