"""The serving path never imports torch (nor the libraries that need it): a process that
builds the app, starts the real tritonserver through it, loads a converted model and
answers a request has none of them in ``sys.modules``. Conversions, which need them, run
in a subprocess of their own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from .conftest import MINILM

SERVE_ONE_REQUEST = """
import json, sys
from fastapi.testclient import TestClient
from embedgate.api.http.app import create_app
from embedgate.api.settings import Settings

settings = Settings(model_repository=sys.argv[1], preload_models=[sys.argv[2]])
with TestClient(create_app(settings)) as client:
    ready = client.get("/health/ready")
    while ready.status_code != 200:
        ready = client.get("/health/ready")
    answer = client.post("/infer", json={"model_name": sys.argv[2], "text": ["served without torch"]})
    heavy = sorted(name for name in ("torch", "sentence_transformers", "transformers", "open_clip", "onnx")
                   if name in sys.modules)
    print(json.dumps({"status": answer.status_code, "dims": len(answer.json()["text_embeddings"][0]), "heavy": heavy}))
"""


def test_a_request_is_served_with_no_torch_in_the_process(gateway, minilm_published, tmp_path):
    with gateway.client() as http:
        assert http.post("/load_sentence_transformer_model", json={"model_name": MINILM}).status_code == 200
    name = MINILM.replace("/", "--")
    shutil.copytree(gateway.repository / name, tmp_path / "repository" / name)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", SERVE_ONE_REQUEST, str(tmp_path / "repository"), MINILM],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome == {"status": 200, "dims": 384, "heavy": []}, outcome
