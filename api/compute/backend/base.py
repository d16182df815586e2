"""The one interface between the gateway and what runs the models: a model's life and its
calls.

The registry decides which models are served and the embedding service what to send
(which inputs, merged how, in which chunks, within which deadline); a backend runs them.
A served model is one or more parts (each a Triton model where Triton runs it, as the
model's kind says); the backend loads them whole, loads one again whose process died,
unloads them, says which it holds and whether it is ready, runs one call (a part's input
tensors in, its output out), and tells what it ran. What it does when the server or a
model's process dies under a call or a load is the backend's own business (Triton's:
``triton.py``, ``resend.py``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..requests.served import ServedModel

# A Triton model's input tensors, by name.
Tensors = dict[str, np.ndarray]
# Told after the server was restarted, with every part gone from it: load them again.
RestartListener = Callable[[], Awaitable[None]]
# Told the part one of whose processes died while the server runs on.
LostListener = Callable[[str], Awaitable[None]]


@dataclass(frozen=True)
class HostMemory:
    """One look at the server's host memory: its own process's resident bytes, and its
    parts' own processes' (Triton's Python-backend stubs), summed by part."""

    server: int | None
    parts: dict[str, int]


class Backend(Protocol):
    # --- the server the parts run in
    # Its restarts under this gateway (a metric).
    restarts: int
    # Whether the gateway watches it (restarts it, sees its lost processes and tells the
    # listeners); False: a server someone else runs, whose lost parts the registry looks
    # for itself (``held``).
    watched: bool

    async def ready(self) -> bool: ...

    def has_gpu(self) -> bool:
        """Whether it runs models on a GPU here, where a new model may ask for one (the
        batching policy's question; blocking the first time)."""
        ...

    def on_restart(self, listener: RestartListener) -> None: ...

    def on_lost_process(self, listener: LostListener) -> None: ...

    async def close(self) -> None:
        """Let go of the server (and stop it where the gateway runs it), after every other
        user of the backend has stopped."""
        ...

    # --- a model's life
    async def load(self, model: ServedModel, *, fresh: bool = False) -> None:
        """Load ``model``'s parts, all of them or none; ``fresh``: its files were just
        written, so a copy the server already holds is an older one."""
        ...

    async def load_again(self, model: ServedModel) -> None:
        """Load again, one after another, the parts of ``model`` a restarted server lost
        (what a restart listener calls: it must not wait for the restart it runs in)."""
        ...

    async def reload(self, part: str) -> None:
        """Load ``part`` anew, whole: new processes for it, the old ones retired."""
        ...

    def abandon(self, part: str, sent_before: float) -> None:
        """``part``'s process was replaced: the calls sent to the old one before
        ``sent_before`` (monotonic) are never answered, and fail as lost to it."""
        ...

    async def unload(self, model: ServedModel, *, timeout_s: float) -> None:
        """Unload ``model``'s parts within ``timeout_s`` (a server down or being brought
        back is waited for)."""
        ...

    async def held(self) -> set[str]:
        """The parts the server has loaded or is loading."""
        ...

    # --- its calls
    async def infer(
        self, model: ServedModel, part: str, tensors: Tensors, output: str, *, timeout_s: float, version: str = ""
    ) -> np.ndarray:
        """``model``'s Triton model ``part`` (at ``version``) on ``tensors``: its ``output``."""
        ...

    # --- what it ran
    async def statistics(self) -> list[dict[str, Any]]:
        """Each part's inference statistics (``GET /metrics``), as Triton names them."""
        ...

    async def metrics_text(self) -> bytes | None:
        """The server's own Prometheus metrics; None where it did not answer."""
        ...

    def host_memory(self) -> HostMemory | None:
        """The server's host memory now (blocking: /proc); None where it runs elsewhere."""
        ...

    def device_memory(self) -> dict[str, int] | None:
        """Each part's GPU memory as the driver reports its processes' (blocking: a
        subprocess); None where it cannot say (no driver, a server that runs elsewhere)."""
        ...
