"""Helpers shared by the tests."""

from __future__ import annotations

import asyncio
import os
import random
import socket
import time

import numpy as np


def cosine_rows(a, b) -> np.ndarray:
    """Cosine similarity of each row of ``a`` with the same row of ``b``."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def eventually(condition, timeout: float = 30.0, what: str = "the condition") -> None:
    """Let the event loop (and threads) run until ``condition()`` holds: the event a test
    means, never a fixed sleep. Fails after a generous ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout:.0f}s for {what}"
        await asyncio.sleep(0.001)


def counted(read, at_least: int, timeout: float = 10.0) -> int:
    """``read()`` once it reaches ``at_least``, or its value after ``timeout``. For Triton's
    inference counts, which can trail the answer by a moment: a decoupled model's worker
    thread sends the answer, and its ``execute`` (after which Triton counts the request)
    may return just after (once seen on a loaded machine: a count still 0 after the answer)."""
    deadline = time.monotonic() + timeout
    value = read()
    while value < at_least and time.monotonic() < deadline:
        time.sleep(0.02)
        value = read()
    return value


def settled(read, quiet: float = 0.5, timeout: float = 10.0) -> int:
    """``read()`` once it has not changed for ``quiet`` seconds (or after ``timeout``): for
    Triton's inference counts, which can trail the answer (see :func:`counted`), so that an
    exact count is read once every inference due has been counted, and one not due would
    have been."""
    deadline = time.monotonic() + timeout
    value, since = read(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = read()
        if now != value:
            value, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
    return value


def python_path(*first) -> str:
    """PYTHONPATH for a subprocess: ``first``, then whatever this process was started with
    (an environment that points ``embedgate`` at a checkout keeps it in its children)."""
    inherited = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    return os.pathsep.join([*map(str, first), *inherited])


def page_curl(page: str) -> tuple[str, dict]:
    """A docs page's one curl example: the path it posts to and its JSON body."""
    import json
    import re
    import shlex

    (curl,) = re.findall(r"```bash\n(curl .*?)\n```", page, re.S)
    arguments = shlex.split(curl.replace("\\\n", " "))
    return "/" + arguments[2].split("/", 1)[1], json.loads(arguments[arguments.index("-d") + 1])


def page_python_lines(page: str, url: str) -> list[list[str]]:
    """A docs page's one Python example, run against ``url`` (for localhost:8686, where
    ``make serve`` listens): the words of each line it prints."""
    return page_python(page, url)[0]


def page_python(page: str, url: str) -> tuple[list[list[str]], dict]:
    """:func:`page_python_lines`, and the names the example left (its ``result``...): what
    it was answered, to compare with the library."""
    import contextlib
    import io
    import re

    (python,) = re.findall(r"```python\n(.*?)```", page, re.S)
    printed = io.StringIO()
    names: dict = {}
    with contextlib.redirect_stdout(printed):
        exec(python.replace("http://localhost:8686", url), names)  # noqa: S102 - the page's own example
    return [line.split() for line in printed.getvalue().splitlines()], names


def words_of(*key: object, count: int = 6) -> str:
    """``count`` words of the tiny models' vocabulary (``tests/tiny_transformers.WORDS``), the
    same for the same ``key``: what makes texts differ for a tiny model. Its tokenizer has
    no digits and few words, so "request 12" and "request 13" are the same [UNK]s to it and
    embed alike: a request answered with another's vector would pass a cosine check. Texts
    that differ in these words do not (under 0.9996 of each other, measured on 4,600)."""
    from tests.tiny_transformers import WORDS

    rng = random.Random(" ".join(map(str, key)))
    return " ".join(rng.choice(WORDS) for _ in range(count))
