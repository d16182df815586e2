"""Bulk jobs: the job-queue mode, through OpenAI's Files and Batch APIs.

A client uploads a JSONL file of requests (``files.py``, checked line by line on upload:
``lines.py``) and creates a batch from it. The batch's lines are grouped by model, sorted by
length across the whole file and cut into chunks (``chunks.py``); the chunks are leased
(``coordinator.py`` over the SQLite store, ``store.py``) to the chunk runner of every
gateway process (``runner.py``), which runs them through the embedding service in the
low-priority lane, behind online requests, writes each chunk's output lines and records
the chunk done before its lease ends. A process that dies loses only its leases: the chunk
is leased again, and its output, written again, is the same. When every chunk is done, the outputs are joined into the batch's output and
error files.
"""
