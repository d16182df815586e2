"""The job store's schema over time: a store written before files and batches had owners
opens with the column added, its rows found only by access to everything."""

import sqlite3

from embedgate.api.jobs.records import FileRecord
from embedgate.api.jobs.store import EVERYTHING, Access, JobStore

BEFORE_OWNERS = """
CREATE TABLE files (id TEXT PRIMARY KEY, filename TEXT NOT NULL, purpose TEXT NOT NULL, bytes INTEGER NOT NULL,
                    created_at INTEGER NOT NULL, lines INTEGER NOT NULL DEFAULT 0);
CREATE TABLE batches (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, input_file_id TEXT NOT NULL, endpoint TEXT NOT NULL,
    completion_window TEXT NOT NULL, metadata TEXT, status TEXT NOT NULL, created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL, in_progress_at INTEGER, finalizing_at INTEGER, completed_at INTEGER,
    failed_at INTEGER, expired_at INTEGER, cancelling_at INTEGER, cancelled_at INTEGER, output_file_id TEXT,
    error_file_id TEXT, errors TEXT, total INTEGER NOT NULL DEFAULT 0, models TEXT NOT NULL DEFAULT '[]');
INSERT INTO files VALUES ('file-old', 'old.jsonl', 'batch', 10, 1, 1);
INSERT INTO batches (id, seq, input_file_id, endpoint, completion_window, status, created_at, expires_at)
    VALUES ('batch_old', 1, 'file-old', '/v1/embeddings', '24h', 'completed', 1, 2);
"""


def test_a_store_from_before_owners_gains_them_and_keeps_its_rows_for_admins(tmp_path):
    path = tmp_path / "jobs.sqlite3"
    old = sqlite3.connect(path)
    old.executescript(BEFORE_OWNERS)
    old.close()
    store = JobStore(path)
    try:
        assert store.file("file-old", EVERYTHING).owner is None
        assert store.batch("batch_old", EVERYTHING).owner is None
        key = Access(owner="some-key")
        assert store.file("file-old", key) is None and store.batch("batch_old", key) is None
        store.add_file(FileRecord("file-new", "new.jsonl", "batch", 5, 2, 1, owner="some-key"))
        assert [f.id for f in store.files(None, key)] == ["file-new"]
        assert {f.id for f in store.files(None, EVERYTHING)} == {"file-old", "file-new"}
    finally:
        store.close()
    JobStore(path).close()  # opening it again changes nothing
