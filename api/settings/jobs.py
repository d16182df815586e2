"""Bulk jobs (OpenAI's Files and Batch APIs): where their state lives, the limits on batch
files, and how chunk runners lease and run chunks."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field


class JobsSettings(BaseModel):
    jobs_dir: Path | None = Field(
        None,
        description="Where bulk jobs keep their state (SQLite) and, for a local model repository, their files. "
        "Default: .embedgate-jobs in a local repository; for an S3 one, jobs/ in the repository cache "
        "(the files then live in the bucket, under .embedgate-jobs/).",
    )
    batch_max_file_bytes: int = Field(200_000_000, ge=1, description="Largest batch file an upload may be.")
    batch_max_requests: int = Field(50_000, ge=1, description="Most requests (lines) in one batch file.")
    batch_chunk_texts: int = Field(
        512, ge=1, description="Texts in one chunk: the unit a chunk runner leases, runs and records at once."
    )
    batch_lease_s: float = Field(
        60.0, gt=0, description="How long a chunk runner holds a chunk without renewing; a dead one's chunks "
        "are run again after it (at once, for a dead process of the same host)."
    )
    batch_chunks_in_hand: int = Field(2, ge=1, description="Chunks one gateway runs at a time.")
    batch_poll_s: float = Field(1.0, gt=0, description="How often an idle chunk runner looks for work.")
