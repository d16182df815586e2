"""The server's port, shared by its gateway workers with ``SO_REUSEPORT``."""

from __future__ import annotations

import socket


def reserve_port(host: str, port: int) -> socket.socket:
    """The server's port, held for its workers: refused if anything listens there, then
    bound with ``SO_REUSEPORT`` (never listening itself) so that each worker can listen on
    it too. The kernel spreads new connections evenly over the workers' sockets; one
    socket shared by all of them would hand a burst of new connections to whichever
    worker woke first."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))  # OSError (address in use) if another server has it
        port = probe.getsockname()[1]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def worker_socket(host: str, port: int) -> socket.socket:
    """A worker's own socket on the server's port (see :func:`reserve_port`), bound and
    not yet listening: the server listens on it once the app has started, so no
    connection is handed to a worker that does not serve the primary's models yet."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock
