"""Progress of long work (converting and loading a model): steps with the seconds since
the work began, written to the server log and handed to listeners (a client following
the load as a stream of events).

The conversion subprocess reports its own steps as ``[  3.2s] step`` lines on stderr
(``converters/__main__.py``); only those lines reach listeners, never the rest of its
output (library noise, tracebacks). The conversion runner logs every line itself. A step
with numbers carries them after a tab as a JSON object: a download's
(``converters/hub/progress.py``) reach listeners as the event's ``download`` (the files and
bytes done of those the snapshot needs, the repository and its commit).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("embedgate.progress")

Event = dict[str, Any]
Listener = Callable[[Event], None]

_STEP_LINE = re.compile(r"^\[\s*\d+(?:\.\d+)?s\] (?P<message>\S[^\t]*?)(?:\t(?P<numbers>.*))?$")
# The numbers a step may carry to listeners, by their key in the converter's line.
NUMBERS = ("download",)


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
            self._tell(match["message"], _numbers(match["numbers"]))

    def relay(self, event: Event) -> None:
        """An event of the same work told by another process (a gateway worker's load,
        run by its primary): to this process's listeners, as it came."""
        for listener in self._listeners:
            listener(event)

    def _tell(self, message: str, numbers: dict[str, Any] | None = None) -> None:
        if self._listeners:
            event = {"event": "progress", "elapsed_s": round(self.elapsed(), 2), "message": message, **(numbers or {})}
            for listener in self._listeners:
                listener(event)


def _numbers(text: str | None) -> dict[str, Any]:
    """The numbers of a step's line that listeners take (``NUMBERS``); none where they do
    not read as a JSON object."""
    if not text:
        return {}
    try:
        numbers = json.loads(text)
    except ValueError:
        return {}
    return {key: numbers[key] for key in NUMBERS if isinstance(numbers, dict) and isinstance(numbers.get(key), dict)}
