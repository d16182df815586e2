"""How long a fault takes to recover from, read from what the clients were answered.

A model has recovered from a fault once a request sent after the fault is answered 200 and
nothing of that model fails after it: its recovery is the seconds from the fault to that
answer. The failures before it (refusals, deadlines, broken connections) are the fault's
window, counted; after it there are none, by construction, so a server that refused forever
after a fault, or that refused again later, never recovers within any bound. The answers'
vectors are each test's to compare with the library (every 200, not only these)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

import httpx


@dataclass
class Clock:
    """When each request was sent and answered, by its text (each request's own)."""

    sent: dict[str, float] = field(default_factory=dict)
    answered: dict[str, float] = field(default_factory=dict)

    def send(self, text: str) -> None:
        self.sent[text] = time.monotonic()

    def answer(self, text: str) -> None:
        self.answered[text] = time.monotonic()


@dataclass
class Recovery:
    fault: str
    seconds: float
    # What failed in the window: "503 triton_unavailable", "504 deadline_exceeded", "ReadError"...
    failed: Counter[str]

    def __str__(self) -> str:
        failed = ", ".join(f"{count} {what}" for what, count in sorted(self.failed.items())) or "nothing failed"
        return f"{self.fault}: recovered in {self.seconds:.1f}s ({failed})"


def failure(answer: httpx.Response | Exception) -> str | None:
    """What ``answer`` was, where it was not a 200."""
    if isinstance(answer, Exception):
        return type(answer).__name__
    if answer.status_code == 200:
        return None
    try:
        code = answer.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        code = repr(answer.text[:40])  # not the error shape: a proxy's own answer
    return f"{answer.status_code} {code}"


def recovered(
    answers: list[tuple[str, httpx.Response | Exception]],
    clock: Clock,
    fault: str,
    fault_at: float,
    until: float = float("inf"),
    tolerated: frozenset[str] = frozenset(),
) -> Recovery:
    """The recovery from ``fault`` (at ``fault_at``) of the model ``answers`` are of, from the
    answers that came between it and ``until`` (the next fault); ``tolerated``: failures the
    test's own load causes at any time (an in-flight limit's 503), not the fault's. A 200
    answered from the response cache is not the model serving: it never ends the window."""
    window = [(text, answer) for text, answer in answers if fault_at <= clock.answered[text] < until]
    failed = [(text, what) for text, answer in window if (what := failure(answer)) and what not in tolerated]
    last = max((clock.answered[text] for text, _ in failed), default=fault_at)
    served = [
        clock.answered[text] for text, answer in window
        if failure(answer) is None and computed(answer) and clock.sent[text] >= fault_at and clock.answered[text] >= last
    ]
    assert served, (
        f"{fault}: no request sent after it was answered 200 with nothing failing after; "
        f"failed: {Counter(what for _, what in failed)}"
    )
    return Recovery(fault, min(served) - fault_at, Counter(what for _, what in failed))


def computed(answer: httpx.Response) -> bool:
    """Whether the model computed every row of ``answer`` (none from the response cache)."""
    return answer.headers.get("x-cached-inputs", "0") == "0"


def broken_per_client(answers: list[tuple[str, httpx.Response | Exception]], client_of) -> Counter[int]:
    """The broken requests (the connection, not an HTTP answer) of each client."""
    return Counter(client_of(text) for text, answer in answers if isinstance(answer, Exception))
