"""Job state in SQLite (WAL): uploaded files, batches, and each batch's chunks with their leases.

One file beside the model repository, written by every gateway of the machine. The chunk
table is the queue: a chunk runner leases the oldest pending chunk (or one whose lease ran out)
for a while, renews the lease while it works, and records the chunk done only while the
lease is still its own, so a chunk is done once whoever finished it. Calls block: the
gateway makes them off the event loop.

Files and batches have an owner: the keyed hash of the API key that created them
(``http/auth.py``), never the key; NULL where no keys were configured, and for rows from
before owners were recorded. Every read a client makes names whose rows it may see
(:class:`Access`), so another key's id is found exactly as an unknown one is: not at all.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .records import BatchRecord, Chunk, FileRecord, Line, Progress

SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    id TEXT PRIMARY KEY,
    filename TEXT NOT NULL,
    purpose TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    lines INTEGER NOT NULL DEFAULT 0,
    owner TEXT
);
CREATE TABLE IF NOT EXISTS batches (
    id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    input_file_id TEXT NOT NULL,
    endpoint TEXT NOT NULL,
    completion_window TEXT NOT NULL,
    metadata TEXT,
    status TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    in_progress_at INTEGER, finalizing_at INTEGER, completed_at INTEGER, failed_at INTEGER,
    expired_at INTEGER, cancelling_at INTEGER, cancelled_at INTEGER,
    output_file_id TEXT, error_file_id TEXT,
    errors TEXT,
    total INTEGER NOT NULL DEFAULT 0,
    models TEXT NOT NULL DEFAULT '[]',
    owner TEXT
);
CREATE TABLE IF NOT EXISTS chunks (
    batch_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    model TEXT NOT NULL,
    lines TEXT NOT NULL,
    texts INTEGER NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending',
    owner TEXT,
    lease_until REAL,
    completed INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    tokens INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (batch_id, idx)
);
CREATE INDEX IF NOT EXISTS chunks_queue ON chunks (state, lease_until);
"""
# A store written before files and batches had owners gains the column (NULL: no owner).
OWNED_TABLES = ("files", "batches")
OWNER_INDEXES = """
CREATE INDEX IF NOT EXISTS files_owner ON files (owner, created_at);
CREATE INDEX IF NOT EXISTS batches_owner ON batches (owner, seq);
"""

# Batch states that have work left for the chunk runners.
ACTIVE = ("in_progress",)


@dataclass(frozen=True)
class Access:
    """Whose files and batches a client's call may find: ``owner``'s own, or with
    ``everything`` all of them (an admin key; any caller where no keys are configured).
    Rows without an owner are found only with ``everything``."""

    owner: str | None = None
    everything: bool = False

    def where(self, column: str = "owner") -> tuple[str, tuple[Any, ...]]:
        """The SQL condition (and its arguments) of the rows this access may find."""
        if self.everything:
            return "1", ()
        return f"{column} = ?", (self.owner,)  # NULL never equals: no owner, nothing found


EVERYTHING = Access(everything=True)


_JSON_FIELDS = {"metadata", "errors", "models"}
_BATCH_FIELDS = list(BatchRecord.model_fields)


class JobStore:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        # WAL with NORMAL survives a killed process (only a power loss can drop the last commits).
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        self._add_owners()

    def _add_owners(self) -> None:
        for table in OWNED_TABLES:
            columns = {row["name"] for row in self._db.execute(f"PRAGMA table_info({table})")}
            if "owner" not in columns:
                self._db.execute(f"ALTER TABLE {table} ADD COLUMN owner TEXT")
        self._db.executescript(OWNER_INDEXES)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def backup(self, target: Path) -> None:
        """A consistent copy of the whole store as ``target`` (SQLite's online backup)."""
        with self._lock:
            copy = sqlite3.connect(str(target))
            try:
                self._db.backup(copy)
            finally:
                copy.close()

    def _run(self, sql: str, *args: Any) -> sqlite3.Cursor:
        with self._lock:
            return self._db.execute(sql, args)

    # --- files
    def add_file(self, record: FileRecord, *, replace: bool = False) -> None:
        """Add a file; with ``replace``, add or replace (a batch's output file, written
        again when its batch is finished again)."""
        values = asdict(record)
        verb = "INSERT OR REPLACE" if replace else "INSERT"
        self._run(
            f"{verb} INTO files ({', '.join(values)}) VALUES ({', '.join('?' for _ in values)})", *values.values()
        )

    def file(self, file_id: str, access: Access = EVERYTHING) -> FileRecord | None:
        visible, args = access.where()
        row = self._run(f"SELECT * FROM files WHERE id = ? AND {visible}", file_id, *args).fetchone()
        return FileRecord(**dict(row)) if row else None

    def files(self, purpose: str | None = None, access: Access = EVERYTHING) -> list[FileRecord]:
        visible, args = access.where()
        if purpose:
            visible, args = f"{visible} AND purpose = ?", (*args, purpose)
        rows = self._run(f"SELECT * FROM files WHERE {visible} ORDER BY created_at DESC, id", *args)
        return [FileRecord(**dict(row)) for row in rows.fetchall()]

    def delete_file(self, file_id: str, access: Access = EVERYTHING) -> bool:
        visible, args = access.where()
        return self._run(f"DELETE FROM files WHERE id = ? AND {visible}", file_id, *args).rowcount == 1

    # --- batches
    def add_batch(self, batch: BatchRecord, chunks: list[Chunk]) -> None:
        values = _batch_row(batch)
        columns = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                seq = self._db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM batches").fetchone()[0]
                self._db.execute(f"INSERT INTO batches (seq, {columns}) VALUES (?, {marks})", (seq, *values.values()))
                self._db.executemany(
                    "INSERT INTO chunks (batch_id, idx, model, lines, texts) VALUES (?, ?, ?, ?, ?)",
                    [(c.batch_id, c.index, c.model, _lines_json(c.lines), c.texts) for c in chunks],
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def batch(self, batch_id: str, access: Access = EVERYTHING) -> BatchRecord | None:
        visible, args = access.where()
        row = self._run(f"SELECT * FROM batches WHERE id = ? AND {visible}", batch_id, *args).fetchone()
        return _batch_record(row) if row else None

    def batches(self, *, after: str | None = None, limit: int = 20, access: Access = EVERYTHING) -> list[BatchRecord]:
        """Newest first; ``after``: the id the previous page ended with (one this access
        cannot find pages like an unknown id: nothing)."""
        visible, args = access.where()
        if after is None:
            rows = self._run(f"SELECT * FROM batches WHERE {visible} ORDER BY seq DESC LIMIT ?", *args, limit)
        else:
            rows = self._run(
                f"SELECT * FROM batches WHERE {visible} "
                f"AND seq < (SELECT seq FROM batches WHERE id = ? AND {visible}) ORDER BY seq DESC LIMIT ?",
                *args, after, *args, limit,
            )
        return [_batch_record(row) for row in rows.fetchall()]

    def active_batches(self) -> list[BatchRecord]:
        """Batches with something left to do (chunks to run, a cancel or a finish), oldest first."""
        rows = self._run(
            "SELECT * FROM batches WHERE status IN ('in_progress', 'finalizing', 'cancelling') ORDER BY seq"
        )
        return [_batch_record(row) for row in rows.fetchall()]

    def update_batch(self, batch_id: str, *, when: tuple[str, ...] = (), **changes: Any) -> bool:
        """Set ``changes``; with ``when``, only while the batch is in one of those states."""
        unknown = set(changes) - set(_BATCH_FIELDS)
        if unknown:
            raise ValueError(f"not batch fields: {sorted(unknown)}")
        values = _columns(changes)
        sets = ", ".join(f"{name} = ?" for name in values)
        sql = f"UPDATE batches SET {sets} WHERE id = ?"
        args: list[Any] = [*values.values(), batch_id]
        if when:
            sql += f" AND status IN ({', '.join('?' for _ in when)})"
            args += list(when)
        return self._run(sql, *args).rowcount == 1

    # --- chunks: the queue
    def lease(self, owner: str, lease_s: float, now: float) -> Chunk | None:
        """The oldest batch's next chunk nobody holds (pending, or its lease ran out), now
        ``owner``'s until ``now + lease_s``."""
        row = self._run(
            """
            UPDATE chunks SET state = 'leased', owner = ?, lease_until = ?
            WHERE rowid = (
                SELECT chunks.rowid FROM chunks JOIN batches ON batches.id = chunks.batch_id
                WHERE batches.status = 'in_progress'
                  AND (chunks.state = 'pending' OR (chunks.state = 'leased' AND chunks.lease_until < ?))
                ORDER BY batches.seq, chunks.idx LIMIT 1
            )
            RETURNING batch_id, idx, model, lines, texts
            """,
            owner, now + lease_s, now,
        ).fetchone()
        if row is None:
            return None
        return Chunk(row["batch_id"], row["idx"], row["model"], _lines(row["lines"]), row["texts"])

    def renew(self, chunk: Chunk, owner: str, lease_s: float, now: float) -> bool:
        """Extend ``owner``'s lease; False if it is no longer theirs."""
        return self._run(
            "UPDATE chunks SET lease_until = ? WHERE batch_id = ? AND idx = ? AND state = 'leased' "
            "AND owner = ? AND lease_until >= ?",
            now + lease_s, chunk.batch_id, chunk.index, owner, now,
        ).rowcount == 1

    def complete(self, chunk: Chunk, owner: str, now: float, *, completed: int, failed: int, tokens: int) -> bool:
        """Record ``chunk`` done, while ``owner``'s lease still holds; False otherwise."""
        return self._run(
            "UPDATE chunks SET state = 'done', completed = ?, failed = ?, tokens = ?, lease_until = NULL "
            "WHERE batch_id = ? AND idx = ? AND state = 'leased' AND owner = ? AND lease_until >= ?",
            completed, failed, tokens, chunk.batch_id, chunk.index, owner, now,
        ).rowcount == 1

    def release(self, owners: list[str]) -> int:
        """Leases of owners that are gone (a killed process), back to pending at once."""
        if not owners:
            return 0
        marks = ", ".join("?" for _ in owners)
        return self._run(
            f"UPDATE chunks SET state = 'pending', owner = NULL, lease_until = NULL "
            f"WHERE state = 'leased' AND owner IN ({marks})",
            *owners,
        ).rowcount

    def release_chunk(self, chunk: Chunk, owner: str) -> None:
        """``owner`` gives its lease on ``chunk`` back (its batch no longer wants the work)."""
        self._run(
            "UPDATE chunks SET state = 'pending', owner = NULL, lease_until = NULL "
            "WHERE batch_id = ? AND idx = ? AND state = 'leased' AND owner = ?",
            chunk.batch_id, chunk.index, owner,
        )

    def live_leases(self, batch_id: str, now: float) -> int:
        return self._run(
            "SELECT COUNT(*) FROM chunks WHERE batch_id = ? AND state = 'leased' AND lease_until >= ?", batch_id, now
        ).fetchone()[0]

    def chunks(self, batch_id: str) -> list[Chunk]:
        rows = self._run("SELECT batch_id, idx, model, lines, texts FROM chunks WHERE batch_id = ? ORDER BY idx", batch_id)
        return [Chunk(r["batch_id"], r["idx"], r["model"], _lines(r["lines"]), r["texts"]) for r in rows.fetchall()]

    def lease_owners(self) -> list[str]:
        return [row[0] for row in self._run("SELECT DISTINCT owner FROM chunks WHERE state = 'leased'").fetchall()]

    def progress(self, batch_id: str) -> Progress:
        row = self._run(
            "SELECT COUNT(*), COALESCE(SUM(state = 'done'), 0), COALESCE(SUM(completed), 0), "
            "COALESCE(SUM(failed), 0), COALESCE(SUM(tokens), 0) FROM chunks WHERE batch_id = ?",
            batch_id,
        ).fetchone()
        return Progress(*row)

    def done_chunks(self, batch_id: str) -> list[int]:
        rows = self._run("SELECT idx FROM chunks WHERE batch_id = ? AND state = 'done' ORDER BY idx", batch_id)
        return [row[0] for row in rows.fetchall()]

    def chunk_count(self, batch_id: str) -> int:
        return self._run("SELECT COUNT(*) FROM chunks WHERE batch_id = ?", batch_id).fetchone()[0]


def _lines_json(lines: tuple[Line, ...]) -> str:
    return json.dumps([[line.number, line.offset, line.length] for line in lines], separators=(",", ":"))


def _lines(text: str) -> tuple[Line, ...]:
    return tuple(Line(*entry) for entry in json.loads(text))


def _columns(values: dict[str, Any]) -> dict[str, Any]:
    return {name: json.dumps(value) if name in _JSON_FIELDS else value for name, value in values.items()}


def _batch_row(batch: BatchRecord) -> dict[str, Any]:
    return _columns(batch.model_dump())


def _batch_record(row: sqlite3.Row) -> BatchRecord:
    values = {name: row[name] for name in _BATCH_FIELDS}
    for name in _JSON_FIELDS:
        values[name] = json.loads(values[name]) if values[name] is not None else None
    values["models"] = values["models"] or []
    return BatchRecord(**values)
