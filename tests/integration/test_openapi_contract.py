"""The OpenAPI document is a truthful contract: schemathesis, every check, against the real
gateway with MiniLM loaded (settings and the two narrow exceptions: schemathesis.toml).

Excluded: the routes that load, unload or delete models (they change the session's state
and a load takes minutes).
"""

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CHANGES_STATE = ["/load_sentence_transformer_model", "/load_clip_model", "/unload_model", "/delete_model"]


def test_every_answer_keeps_the_openapi_contract(gateway, minilm_loaded):
    command = [
        sys.executable, "-m", "schemathesis.cli",
        "--config-file", str(HERE / "schemathesis.toml"),
        "run", f"{gateway.url}/openapi.json",
        "--checks", "all",
        # Deterministic and bounded: a fixed seed, 50 cases per operation, no example database.
        "--seed", "1",
        "--max-examples", "50",
        "--generation-database", "none",
        "--no-color",
        *(option for path in CHANGES_STATE for option in ("--exclude-path", path)),
    ]  # fmt: skip
    # From the repository root: the config's hooks path is relative to it.
    run = subprocess.run(command, check=False, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"schemathesis failed ({run.returncode}):\n{run.stdout}\n{run.stderr}"
