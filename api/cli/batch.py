"""``embedgate batch``: bulk jobs from the command line.

``submit FILE.jsonl`` uploads a file of requests and creates a batch (``--wait`` follows it
with a progress bar and writes its output); ``status``, ``cancel`` and ``list`` do what
they say. A line of the file is a request as OpenAI's Batch API takes it
(``{"custom_id", "method", "url", "body"}``), or just its body (``{"input": "..."}``), which
gets a ``custom_id`` of its line number; ``--model`` names the model of every line that
names none.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from .client import EmbedgateClient

ENDPOINTS = ("/v1/embeddings", "/v1/rerank", "/v2/embed")
FINISHED = ("completed", "failed", "cancelled", "expired")
BAR_WIDTH = 30


def add_parser(commands: argparse._SubParsersAction, client: list[argparse.ArgumentParser]) -> None:
    batch = commands.add_parser("batch", help="bulk jobs: submit a file of requests, follow it, cancel it")
    actions = batch.add_subparsers(dest="batch_command", required=True)
    submit = actions.add_parser("submit", parents=client, help="upload FILE.jsonl and run it as a batch")
    submit.add_argument("file", type=Path, metavar="FILE.jsonl")
    submit.add_argument("--model", help="the model of every line that names none")
    submit.add_argument("--endpoint", choices=ENDPOINTS, default=ENDPOINTS[0], help="what every line calls")
    submit.add_argument("--wait", action="store_true", help="follow the batch to its end, with a progress bar")
    submit.add_argument("-o", "--output", type=Path,
                        help="with --wait: write the output lines here (failed lines to OUTPUT.errors.jsonl)")
    for name, what in (("status", "show a batch"), ("cancel", "cancel a batch (what ran is kept)")):
        actions.add_parser(name, parents=client, help=what).add_argument("batch_id", metavar="BATCH_ID")
    listing = actions.add_parser("list", parents=client, help="the latest batches")
    listing.add_argument("--limit", type=int, default=20)


def run(client: EmbedgateClient, args: argparse.Namespace) -> int:
    command = args.batch_command
    if command == "submit":
        return _submit(client, args)
    if command == "status":
        print(json.dumps(client.batch(args.batch_id)))
    elif command == "cancel":
        print(json.dumps(client.cancel_batch(args.batch_id)))
    else:
        for batch in client.batches(args.limit):
            counts = batch["request_counts"]
            print(f"{batch['id']}  {batch['status']:<11} {counts['completed']}/{counts['total']}"
                  f" ({counts['failed']} failed)  {batch['endpoint']}")
    return 0


def requests_of(text: str, endpoint: str, model: str | None) -> bytes:
    """The file's lines as batch requests: bodies wrapped, ``model`` filled in."""
    lines = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        line: Any = json.loads(raw)
        if isinstance(line, dict) and "body" not in line and "custom_id" not in line:
            line = {"custom_id": f"line-{number}", "method": "POST", "url": endpoint, "body": line}
        body = line.get("body") if isinstance(line, dict) else None
        if model and isinstance(body, dict) and "model" not in body:
            body["model"] = model
        lines.append(json.dumps(line, ensure_ascii=False))
    return ("\n".join(lines) + "\n").encode()


def _submit(client: EmbedgateClient, args: argparse.Namespace) -> int:
    try:
        content = requests_of(args.file.read_text(encoding="utf-8"), args.endpoint, args.model)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        print(f"embedgate: cannot read {args.file}: {error}", file=sys.stderr)
        return 1
    uploaded = client.upload_batch_file(args.file.name, content)
    batch = client.create_batch(uploaded["id"], args.endpoint)
    print(batch["id"], file=sys.stderr)
    if not args.wait:
        print(json.dumps(batch))
        return 0
    while batch["status"] not in FINISHED:
        _progress(batch)
        time.sleep(0.5)
        batch = client.batch(batch["id"])
    _progress(batch)
    print(file=sys.stderr)
    if args.output:
        _save(client, batch.get("output_file_id"), args.output)
        _save(client, batch.get("error_file_id"), args.output.with_suffix(".errors.jsonl"))
    else:
        print(json.dumps(batch))
    return 0 if batch["status"] == "completed" else 1


def _progress(batch: dict[str, Any]) -> None:
    counts = batch["request_counts"]
    total, done = max(counts["total"], 1), counts["completed"] + counts["failed"]
    filled = BAR_WIDTH * done // total
    bar = "#" * filled + "-" * (BAR_WIDTH - filled)
    print(f"\r[{bar}] {done}/{counts['total']} {batch['status']:<11} ({counts['failed']} failed)",
          end="", file=sys.stderr, flush=True)


def _save(client: EmbedgateClient, file_id: str | None, path: Path) -> None:
    if not file_id:
        return
    with path.open("wb") as sink:
        client.download(file_id, sink)
    print(f"{path}", file=sys.stderr)
