"""A small HTTP server for the image tests, on a loopback address of the test's choosing.

Routes are added by the test: a body with a status and headers, optionally sent in chunks
(no Content-Length), endlessly, or only once the test releases it. ``requests`` records
the paths that were asked for.
"""

from __future__ import annotations

import io
import itertools
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Route:
    body: bytes = b""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    chunked: bool = False  # no Content-Length: the body arrives in 64 KiB chunks
    endless: bool = False  # chunked, the body again and again until the client hangs up
    hold: threading.Event | None = None  # answers only once it is set


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        # Clients that hang up (a refused peer, a byte limit) are part of the tests.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class ImageServer:
    def __init__(self, host: str = "127.0.0.1"):
        self.routes: dict[str, Route] = {}
        self.requests: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                server.requests.append(self.path)
                route = server.routes.get(self.path.split("?")[0])
                if route is None:
                    route = Route(b"not found", 404)
                if route.hold is not None:
                    route.hold.wait()
                try:
                    self.send_response(route.status)
                    for name, value in route.headers.items():
                        self.send_header(name, value)
                    if route.chunked or route.endless:
                        self.send_header("Transfer-Encoding", "chunked")
                        self.end_headers()
                        repeats = itertools.count() if route.endless else range(1)
                        for _ in repeats:
                            stream = io.BytesIO(route.body)
                            while chunk := stream.read(65536):
                                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.write(b"0\r\n\r\n")
                    else:
                        self.send_header("Content-Length", str(len(route.body)))
                        self.end_headers()
                        self.wfile.write(route.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading: what a byte limit does

            def log_message(self, *args) -> None:
                pass

        self._server = _QuietServer((host, 0), Handler)
        self.host, self.port = self._server.server_address[:2]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def add(self, path: str, body: bytes = b"", **options) -> str:
        self.routes[path] = Route(body, **options)
        return self.url(path)

    def redirect(self, path: str, location: str, status: int = 302) -> str:
        return self.add(path, b"", status=status, headers={"Location": location})

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
