"""The ``embedgate`` command line against the real gateway: a load that converts shows its
steps with elapsed times (in the CLI and in the server log), then embed, models, unload
and delete."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np

from tests import tiny_models
from tests.helpers import cosine_rows

NAME = "cli/tiny"
STEP = re.compile(r"^\[\s*\d+\.\ds\] (?P<message>.+)$")


def embedgate(gateway, *argv: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, EMBEDGATE_URL=gateway.url)
    return subprocess.run(
        [sys.executable, "-m", "embedgate.api", *argv], env=env, capture_output=True, text=True, timeout=timeout
    )


def test_load_embed_list_unload_delete(gateway, tmp_path):
    # A tiny model: the conversion's steps are the same as any dense model's, in seconds.
    from sentence_transformers import SentenceTransformer

    model = tiny_models.dense_model(tmp_path / "model", seed=11)
    library = SentenceTransformer(str(model), device="cpu")
    loaded = embedgate(gateway, "load", NAME, "--model-path", str(model))
    assert loaded.returncode == 0, loaded.stderr
    assert json.loads(loaded.stdout)["converted"] is True

    # Progress: the converter's steps and the gateway's, each with elapsed seconds, in order.
    steps = [STEP.match(line) for line in loaded.stderr.splitlines()]
    assert all(steps), loaded.stderr
    messages = [m["message"] for m in steps]
    for expected in ("exporting ONNX", "parity passed", "loading into Triton", "ready"):
        assert any(m.startswith(expected) for m in messages), messages
    assert messages.index("loading into Triton") > max(i for i, m in enumerate(messages) if m.startswith("parity"))
    elapsed = [float(m.group(0)[1:].split("s]")[0]) for m in steps]
    assert elapsed == sorted(elapsed) and elapsed[-1] > 0
    # The server log has the same steps with elapsed times.
    assert re.search(rf"\[{NAME}\] \[\s*\d+\.\ds\] loading into Triton", gateway.log())

    texts = ["the command line embeds this", "and this"]
    embedded = embedgate(gateway, "embed", NAME, *texts)
    assert embedded.returncode == 0, embedded.stderr
    vectors = np.asarray([json.loads(line) for line in embedded.stdout.splitlines()])
    assert cosine_rows(vectors, library.encode(texts)).min() >= 0.9999

    listed = embedgate(gateway, "models")
    assert listed.returncode == 0, listed.stderr
    row = next(line.split() for line in listed.stdout.splitlines() if line.startswith(NAME))
    assert row[1:] == ["-", "sentence_transformer", "32", "64", "python", "yes"]

    again = embedgate(gateway, "load", NAME)
    assert again.returncode == 0 and json.loads(again.stdout)["status"] == "already_loaded"

    unloaded = embedgate(gateway, "unload", NAME)
    assert unloaded.returncode == 0 and unloaded.stdout.strip() == f"Model {NAME} unloaded."
    listed = embedgate(gateway, "models", "--all", "--json")
    assert {m["model_name"]: m["loaded"] for m in json.loads(listed.stdout)}[NAME] is False

    deleted = embedgate(gateway, "delete", NAME)
    assert deleted.returncode == 0, deleted.stderr
    gone = embedgate(gateway, "embed", NAME, "x")
    assert gone.returncode == 1 and "404 model_not_found" in gone.stderr


def test_a_failed_load_reports_the_servers_error(gateway):
    failed = embedgate(gateway, "load", "nobody/not-offline")
    assert failed.returncode == 1
    assert "403 hub_download_disabled" in failed.stderr and "EMBEDGATE_ALLOW_HUB_DOWNLOAD" in failed.stderr
    assert "Traceback" not in failed.stderr


def test_batch_submit_wait_status_and_list(gateway, minilm_loaded, minilm, tmp_path):
    texts = [f"bulk text number {i} about the quick brown fox" for i in range(30)]
    source = tmp_path / "texts.jsonl"
    # Bare bodies: each gets a custom_id of its line number and the --model.
    source.write_text("\n".join(json.dumps({"input": text}) for text in texts) + "\n")
    output = tmp_path / "out.jsonl"
    submitted = embedgate(gateway, "batch", "submit", str(source), "--model", "sentence-transformers/all-MiniLM-L6-v2",
                          "--wait", "-o", str(output))
    assert submitted.returncode == 0, submitted.stderr
    batch_id = submitted.stderr.splitlines()[0]
    assert "[##############################] 30/30 completed" in submitted.stderr
    rows = {row["custom_id"]: row for row in map(json.loads, output.read_text().splitlines())}
    assert sorted(rows) == sorted(f"line-{i}" for i in range(1, 31))
    vectors = [rows[f"line-{i + 1}"]["response"]["body"]["data"][0]["embedding"] for i in range(len(texts))]
    assert cosine_rows(vectors, minilm.encode(texts)).min() >= 0.9999
    assert not output.with_suffix(".errors.jsonl").exists()

    status = embedgate(gateway, "batch", "status", batch_id)
    assert json.loads(status.stdout)["request_counts"] == {"total": 30, "completed": 30, "failed": 0}
    listed = embedgate(gateway, "batch", "list")
    assert any(line.startswith(f"{batch_id}  completed") for line in listed.stdout.splitlines()), listed.stdout
    refused = embedgate(gateway, "batch", "cancel", batch_id)
    assert refused.returncode == 1 and "409 batch_state_conflict" in refused.stderr
