"""What the job store keeps and the coordinator hands out: files, batches, chunks and a
batch's progress. Each crosses processes as it is (pickled to a workers' primary, to a Ray
actor).

A batch's fields are OpenAI's batch object's (``BatchFields``), declared once here: the
store's record adds what only the store keeps (``BatchRecord``), and the object the Batch
API answers (``http/openai/batch_schemas.py``) adds what it computes on the way out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field

BatchStatus = Literal[
    "validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled"
]


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


class BatchFields(BaseModel):
    """A batch's fields that OpenAI's batch object shows as the store keeps them, in
    OpenAI's order."""

    id: str
    endpoint: str
    input_file_id: str
    completion_window: str
    status: BatchStatus
    output_file_id: str | None = None
    error_file_id: str | None = None
    created_at: int
    in_progress_at: int | None = None
    # Optional in OpenAI's object; every batch in the store has one (``BatchRecord``).
    expires_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    metadata: dict[str, str] | None = None


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
