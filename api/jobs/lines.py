"""The lines of a batch file: checked when the file is uploaded, read back when a chunk runs.

A batch file is JSONL, one request per line, as OpenAI's Batch API takes it:
``{"custom_id": "...", "method": "POST", "url": "/v1/embeddings", "body": {...}}``. An upload
is refused, with the number of the first bad line, unless every line is such an object with
a unique ``custom_id`` and a URL this server runs in batches. What a body asks for (its
model, its inputs) is judged when the line runs: a line that fails then goes to the batch's
error file and the others go on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InvalidBatchFile
from .records import Line

MAX_CUSTOM_ID_CHARS = 512


@dataclass(frozen=True)
class RequestLine:
    """One line as the chunk runner runs it."""

    number: int
    custom_id: str
    url: str
    body: dict[str, Any]


def iterate(path: Path) -> Iterator[tuple[Line, bytes]]:
    """Each line's place (number from 1, byte offset, length without the newline) and bytes."""
    offset = 0
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            content = raw.rstrip(b"\r\n")
            yield Line(number, offset, len(content)), content
            offset += len(raw)


def parse(number: int, content: bytes) -> RequestLine:
    """A request line, or :class:`InvalidBatchFile` saying what is wrong with it."""
    if not content.strip():
        raise InvalidBatchFile("empty line (a batch file holds one JSON request per line)", number)
    try:
        value = json.loads(content)
    except UnicodeDecodeError:
        raise InvalidBatchFile("not UTF-8 text", number) from None
    except ValueError as error:
        raise InvalidBatchFile(f"not valid JSON ({error})", number) from None
    if not isinstance(value, dict):
        raise InvalidBatchFile("not a JSON object", number)
    unknown = sorted(set(value) - {"custom_id", "method", "url", "body"})
    if unknown:
        raise InvalidBatchFile(f"unknown fields {unknown}", number)
    custom_id, method, url, body = (value.get(key) for key in ("custom_id", "method", "url", "body"))
    if not isinstance(custom_id, str) or not custom_id or len(custom_id) > MAX_CUSTOM_ID_CHARS:
        raise InvalidBatchFile(f"custom_id must be a string of 1 to {MAX_CUSTOM_ID_CHARS} characters", number)
    if method != "POST":
        raise InvalidBatchFile(f"method must be POST, not {method!r}", number)
    if not isinstance(url, str):
        raise InvalidBatchFile("url must be a string", number)
    if not isinstance(body, dict):
        raise InvalidBatchFile("body must be a JSON object", number)
    return RequestLine(number, custom_id, url, body)


def check_upload(path: Path, urls: tuple[str, ...], max_lines: int) -> int:
    """The number of request lines in the uploaded ``path``, after checking every one; the
    first bad line refuses the upload (:class:`InvalidBatchFile`)."""
    seen: set[str] = set()
    count = 0
    last_empty: int | None = None
    for line, content in iterate(path):
        if not content.strip():
            last_empty = last_empty or line.number
            continue
        if last_empty is not None:
            parse(last_empty, b"")  # an empty line before this one: refused with its number
        count += 1
        if count > max_lines:
            raise InvalidBatchFile(f"more than {max_lines} requests in one batch file", line.number)
        request = parse(line.number, content)
        if request.url not in urls:
            raise InvalidBatchFile(f"url {request.url!r} is not one this server runs in batches ({', '.join(urls)})", line.number)
        if request.custom_id in seen:
            raise InvalidBatchFile(f"custom_id {request.custom_id!r} appears twice", line.number)
        seen.add(request.custom_id)
    if count == 0:
        raise InvalidBatchFile("the file holds no requests")
    return count


def read(path: Path, lines: tuple[Line, ...]) -> list[RequestLine]:
    """The request lines at ``lines`` of an uploaded (so already checked) file."""
    requests = []
    with path.open("rb") as handle:
        for line in lines:
            handle.seek(line.offset)
            requests.append(parse(line.number, handle.read(line.length)))
    return requests
