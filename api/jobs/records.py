"""What the job store keeps and the coordinator hands out: files, batches, chunks and a
batch's progress. Each crosses processes as it is (pickled to a workers' primary, to a Ray
actor).

A batch's fields are OpenAI's batch object's (``BatchFields``), declared once with the API's
bodies (``endpoints/schemas/batches.py``): the store's record adds what only the store keeps
(``BatchRecord``), and the object the Batch API answers adds what it computes on the way out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import Field

from ..endpoints.schemas.batches import BatchFields


@dataclass
class FileRecord:
    id: str
    filename: str
    purpose: str
    bytes: int
    created_at: int
    lines: int = 0
    # The keyed hash of the key that created it (a batch's output: the batch's owner's).
    owner: str | None = None


class BatchRecord(BatchFields):
    """A batch as the store keeps it: OpenAI's fields and the store's own."""

    expires_at: int
    # [{"code", "message", "line"?, "param"?}]: why the batch failed (OpenAI's object
    # shows them as a list object).
    errors: list[dict[str, Any]] | None = None
    # Its request lines (OpenAI's object shows them as request_counts.total).
    total: int = 0
    # The models its lines name that were loaded when it was created.
    models: list[str] = Field(default_factory=list)
    # The keyed hash of the key that created it.
    owner: str | None = None


@dataclass(frozen=True)
class Line:
    """One request line of the input file: its number (from 1) and where its bytes are."""

    number: int
    offset: int
    length: int


@dataclass(frozen=True)
class Chunk:
    batch_id: str
    index: int
    model: str
    lines: tuple[Line, ...]
    texts: int


@dataclass(frozen=True)
class Progress:
    chunks: int
    done: int
    completed: int
    failed: int
    tokens: int
