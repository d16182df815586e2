"""The OpenAPI document is a truthful contract: schemathesis, every check, against the real
gateway with MiniLM, a reranker, a classifier and a multimodal model (a model of two Triton
models: GET /metrics answers an entry per part) loaded (settings and the narrow exceptions:
schemathesis.toml).

Excluded: the routes that load, unload or delete models (they change the session's state
and a load takes minutes).
"""

import subprocess
import sys
from pathlib import Path

import pytest

from embedgate.api.endpoints.schemas.predict import PredictRequest
from embedgate.api.endpoints.schemas.rerank import RerankRequest
from tests import tiny_models
from tests.multimodal_models import clip_form_model

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CHANGES_STATE = ["/load_sentence_transformer_model", "/load_clip_model", "/unload_model", "/delete_model"]
# The reranker the document's /rerank example names, so that the example phase reaches a
# real answer (a tiny random model under that name: the contract is the shape, not the scores).
RERANKER = RerankRequest.model_fields["model"].examples[0]
# Likewise the classifier /predict's example names.
CLASSIFIER = PredictRequest.model_fields["model"].examples[0]
# A model of several parts, each with its own entry in GET /metrics.
MULTIMODAL = "tiny/multimodal"


@pytest.fixture
def examples_loaded(gateway, tmp_path):
    directories = {
        RERANKER: tiny_models.cross_encoder(tmp_path / "reranker"),
        CLASSIFIER: tiny_models.classifier(tmp_path / "classifier"),
        MULTIMODAL: clip_form_model(tmp_path / "multimodal"),
    }
    with gateway.client(timeout=600) as http:
        for name, directory in directories.items():
            response = http.post("/load_sentence_transformer_model", json={"model_name": name, "model_path": str(directory)})
            assert response.status_code == 200, response.text
        yield
        for name in directories:
            assert http.post("/delete_model", json={"model_name": name}).status_code == 200


def test_every_answer_keeps_the_openapi_contract(gateway, minilm_loaded, examples_loaded):
    with gateway.client() as http:
        stats = http.get("/metrics").json()["model_stats"]
    # What the document's /metrics must describe: a part's entry names its part.
    assert {entry.get("part") for entry in stats if entry["name"] == MULTIMODAL} == {"text", "image"}
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
