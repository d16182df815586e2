"""Progress of long work (converting and loading a model): steps with the seconds since
the work began, written to the server log and handed to listeners (a client following
the load as a stream of events).

The conversion subprocess reports its own steps as ``[  3.2s] step`` lines on stderr
(``converters/__main__.py``); only those lines reach listeners, never the rest of its
output (library noise, tracebacks). The conversion runner logs every line itself.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("embedgate.progress")

Event = dict[str, Any]
Listener = Callable[[Event], None]

_STEP_LINE = re.compile(r"^\[\s*\d+(?:\.\d+)?s\] (?P<message>\S.*)$")


class Progress:
    def __init__(self, subject: str):
        self.subject = subject
        self.started = time.monotonic()
        self._listeners: list[Listener] = []

    def listen(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def unlisten(self, listener: Listener) -> None:
        self._listeners.remove(listener)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def step(self, message: str) -> None:
        """A step of the gateway's own work: logged, and told to listeners."""
        log.info("[%s] [%6.1fs] %s", self.subject, self.elapsed(), message)
        self._tell(message)

    def converter_line(self, line: str) -> None:
        """A line of the conversion subprocess's stderr (already logged by the runner)."""
        match = _STEP_LINE.match(line)
        if match:
            self._tell(match["message"])

    def relay(self, event: Event) -> None:
        """An event of the same work told by another process (a gateway worker's load,
        run by its primary): to this process's listeners, as it came."""
        for listener in self._listeners:
            listener(event)

    def _tell(self, message: str) -> None:
        if self._listeners:
            event = {"event": "progress", "elapsed_s": round(self.elapsed(), 2), "message": message}
            for listener in self._listeners:
                listener(event)
