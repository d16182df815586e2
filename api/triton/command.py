"""The tritonserver command line: its ports, its flags, and the level its output lines
are logged at."""

from __future__ import annotations

import logging
import re
import socket
from dataclasses import dataclass
from pathlib import Path

from ..settings import Settings
from . import bundle


@dataclass(frozen=True)
class Ports:
    http: int
    grpc: int
    metrics: int


def _free_port(taken: set[int]) -> int:
    """A port nothing listens on now, none of ``taken`` (which it joins)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in taken:
            taken.add(port)
            return port


def choose_ports(settings: Settings) -> Ports:
    """Triton's ports: those set, else free ones. Never the gateway's own port, which
    Triton starts before the gateway binds: a free port may be the one it is about to take."""
    taken = {settings.port, settings.triton_http_port, settings.triton_grpc_port, settings.triton_metrics_port}
    return Ports(
        http=settings.triton_http_port or _free_port(taken),
        grpc=settings.triton_grpc_port or _free_port(taken),
        metrics=settings.triton_metrics_port or _free_port(taken),
    )


# What tritonserver says, and then exits, when a port it was given is bound by another process.
_PORT_TAKEN = re.compile(r"Socket '[^']*:(\d+)' already in use")


class PortTaken(RuntimeError):
    """tritonserver exited during startup: ``port`` was taken."""

    def __init__(self, port: int, code: int | None):
        super().__init__(f"tritonserver exited during startup (code {code}): port {port} is taken")
        self.port = port


def taken_port(line: str) -> int | None:
    """The port a line of tritonserver's output says is taken, or None."""
    found = _PORT_TAKEN.search(line)
    return int(found.group(1)) if found else None


def chosen_freely(settings: Settings, port: int) -> bool:
    """Whether ``port`` is one ``choose_ports`` picked (not one the settings name): a port
    picked free may be taken before Triton binds it (another process's outgoing connection
    gets it from the same range), and other free ones will do."""
    return port not in {settings.triton_http_port, settings.triton_grpc_port, settings.triton_metrics_port}


def build_command(
    prepared: bundle.PreparedTriton,
    repository: str | Path,
    ports: Ports,
    shm_prefix: str,
    settings: Settings,
) -> list[str]:
    """The tritonserver command line. Every address is loopback: Triton's control API
    accepts model files and must never be reachable from outside."""
    return [
        str(prepared.binary),
        f"--model-repository={repository}",
        "--model-control-mode=explicit",
        # Every config.pbtxt is written whole (converters/triton_config.py): without this,
        # the Python backend starts one more stub per load only to ask model.py (which has
        # no auto_complete_config) to complete it, a second process's imports on every load.
        "--disable-auto-complete-config",
        f"--backend-directory={prepared.backend_dir}",
        f"--cache-directory={prepared.cache_dir}",
        f"--backend-config=python,shm-region-prefix-name={shm_prefix}",
        f"--backend-config=python,stub-timeout-seconds={settings.triton_stub_timeout_s}",
        "--http-address=127.0.0.1",
        f"--http-port={ports.http}",
        "--grpc-address=127.0.0.1",
        f"--grpc-port={ports.grpc}",
        "--metrics-address=127.0.0.1",
        f"--metrics-port={ports.metrics}",
        "--allow-gpu-metrics=false",
        "--strict-readiness=true",
        f"--exit-timeout-secs={settings.triton_exit_timeout_s}",
        f"--log-verbose={settings.triton_log_verbose}",
    ]


def log_level(line: str) -> int:
    """The level a line of Triton's output is logged at. Triton prefixes its own lines with
    I/W/E and a date: errors and warnings matter. A crash's last words ("Signal (6)
    received.", a C++ "terminate called ...") and why it could not start ("error: ...")
    come bare and matter most; the rest (its start-up tables) is detail."""
    if line.startswith(("error:", "Signal (", "terminate called")):
        return logging.ERROR
    if "CudaDriverHelper" in line:  # no GPU here: expected and harmless
        return logging.DEBUG
    return {"E": logging.WARNING, "W": logging.INFO}.get(line[:1], logging.DEBUG)
