"""A Triton someone else runs (``EMBEDGATE_TRITON_URL``): nothing to start, stop or
restart, and its processes are not the gateway's to watch."""

from __future__ import annotations

import logging

from .server import LostListener, RestartListener

log = logging.getLogger("embedgate.triton")


class ExternalTriton:
    """A Triton someone else runs: nothing to start or stop."""

    embedded = False
    restarts = 0
    pid = None
    serving = True

    def __init__(self, url: str, metrics_url: str | None = None, grpc_url: str | None = None):
        self.url = url
        host = url.rsplit(":", 1)[0]
        self.metrics_url = metrics_url or f"http://{host}:8002/metrics"
        self.grpc_url = grpc_url or f"{host}:8001"

    def is_ready(self) -> bool:
        return True

    def on_restart(self, listener: RestartListener) -> None:
        pass

    def on_lost_process(self, listener: LostListener) -> None:
        pass  # its processes are not ours to see: requests that meet a lost one tell

    async def wait_restarted(self, since: int) -> bool:
        return False  # nobody here restarts it

    async def wait_serving(self) -> bool:
        return True  # serving as far as the gateway can tell: its answers say otherwise

    async def watch_load(self, triton_name: str) -> None:
        pass  # its processes are not ours to see

    async def start(self) -> None:
        log.info("using external Triton at %s", self.url)

    async def stop(self) -> None:
        pass
