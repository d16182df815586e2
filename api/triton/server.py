"""What the gateway's Triton backend needs of the tritonserver it talks to: where it is,
whether it is ready, its restarts and the processes it lost. Three things are one: the
embedded supervisor (``supervisor.py``), a Triton someone else runs (``external.py``), and
in a gateway worker its primary's supervisor as reported to it (``api/workers/cluster.py``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

# Told after a restart, with every model gone from the new tritonserver: load them again.
RestartListener = Callable[[], Awaitable[None]]
# Told the Triton model (a part) one of whose instances lost its stub process.
LostListener = Callable[[str], Awaitable[None]]


class TritonServer(Protocol):
    # Someone here watches it (restarts it when it dies, sees its lost processes); False: an
    # external Triton, whose lost models the gateway looks for itself.
    embedded: bool
    restarts: int
    # Runs with its models loaded (false from its death until they are back).
    serving: bool
    url: str
    grpc_url: str
    metrics_url: str
    pid: int | None

    def is_ready(self) -> bool: ...

    def on_restart(self, listener: RestartListener) -> None: ...

    def on_lost_process(self, listener: LostListener) -> None: ...

    async def wait_restarted(self, since: int) -> bool:
        """After a lost connection: wait until it was restarted (counted past ``since``) and
        its models loaded again; False when it never went away."""
        ...

    async def wait_serving(self) -> bool:
        """Wait until it runs with its models loaded; False when it is being stopped."""
        ...

    async def watch_load(self, triton_name: str) -> None:
        """Run beside a load of ``triton_name`` (it may end a tritonserver whose load hangs)."""
        ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...
