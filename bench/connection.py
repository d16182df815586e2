"""A lean HTTP/1.1 keep-alive client for the load generator: one connection per client,
one request at a time on it, responses parsed by httptools (the C parser uvicorn uses).

The load generator runs on the same cores as the server it measures, so every
microsecond it spends per request is taken from the server. A general-purpose client
(aiohttp) spends about 0.2 ms of CPU per request on connection pooling, header objects and
its stream machinery; this one writes a request head built once per run and reads the
answer straight off the socket.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httptools


@dataclass
class Response:
    status: int
    headers: dict[str, str] = field(default_factory=dict)  # names lower-cased
    body: bytes = b""


@dataclass(frozen=True)
class Target:
    """Where the load goes: host, port, TLS, and the headers every request carries."""

    host: str
    port: int
    tls: ssl.SSLContext | None
    base_path: str
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_url(cls, url: str, headers: dict[str, str] | None = None) -> "Target":
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"expected an http:// or https:// URL, got {url!r}")
        secure = parts.scheme == "https"
        return cls(
            host=parts.hostname,
            port=parts.port or (443 if secure else 80),
            tls=ssl.create_default_context() if secure else None,
            base_path=parts.path.rstrip("/"),
            headers=tuple((headers or {}).items()),
        )

    def post_head(self, path: str) -> bytes:
        """The request head up to the body length, which each request appends."""
        host = self.host if self.port in (80, 443) else f"{self.host}:{self.port}"
        lines = [f"POST {self.base_path}{path} HTTP/1.1", f"Host: {host}", "Content-Type: application/json"]
        lines += [f"{name}: {value}" for name, value in self.headers]
        return ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")


class Connection(asyncio.Protocol):
    """One keep-alive connection. ``post`` sends a request and waits for its response; a
    broken connection fails the request in flight with ``ConnectionError`` and must be
    replaced (``open`` again)."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[Response] | None = None
        self._response: Response | None = None
        self._body: list[bytes] = []
        self.closed = False

    @classmethod
    async def open(cls, target: Target) -> "Connection":
        loop = asyncio.get_running_loop()
        _, connection = await loop.create_connection(
            cls, target.host, target.port, ssl=target.tls, server_hostname=target.host if target.tls else None
        )
        return connection

    async def post(self, head: bytes, body: bytes) -> Response:
        if self.closed or self._transport is None:
            raise ConnectionError("connection is closed")
        self._waiter = asyncio.get_running_loop().create_future()
        self._transport.write(b"%s%d\r\n\r\n%s" % (head, len(body), body))
        try:
            return await self._waiter
        finally:
            self._waiter = None

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ConnectionError(f"malformed response: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(ConnectionError(f"connection lost: {exc or 'closed by the server'}"))

    def _fail(self, exc: Exception) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._response = Response(status=0)
        self._body = []

    def on_header(self, name: bytes, value: bytes) -> None:
        assert self._response is not None
        self._response.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        assert self._response is not None
        self._response.status = self._parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        response, self._response = self._response, None
        assert response is not None
        response.body = b"".join(self._body)
        self._body = []
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(response)
        if not self._parser.should_keep_alive():
            self.close()
