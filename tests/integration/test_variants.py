"""Variants end to end: '@int8' and '@optimized' converted, loaded and served through the
real gateway and tritonserver, beside the plain model, each under its own name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from embedgate.api.models.names import to_triton_name
from tests.helpers import cosine_rows
from tests.run_shared import published_once

from .conftest import MINILM

REPO_ROOT = Path(__file__).resolve().parents[2]
INT8 = f"{MINILM}@int8"
OPTIMIZED = f"{MINILM}@optimized"
SENTENCES = [
    "A man is eating food.",
    "The girl is carrying a baby.",
    "Stocks fell sharply after the central bank raised interest rates.",
    "short",
    "Ünïcödé text, emoji 🚀, and 中文.",
    "A much longer sentence " * 100,
]


@pytest.fixture(scope="module")
def variants(gateway, minilm_published, run_dir):
    """Both variants loaded beside the plain model (which is loaded first); deleted after.
    Each is converted once in the run: by this gateway, or by the converter tests with the
    same spec (``tests/run_shared.py``), whichever comes first."""
    with gateway.client(timeout=600) as http:
        plain = http.post("/load_sentence_transformer_model", json={"model_name": MINILM})
        assert plain.status_code == 200, plain.text
        loads = {}
        for name, options in ((INT8, {"quantize": "int8"}), (OPTIMIZED, {"optimize": True})):
            answers: list[httpx.Response] = []

            def load(options=options, answers=answers) -> None:
                answers.append(http.post("/load_sentence_transformer_model", json={"model_name": MINILM, **options}))

            published_once(run_dir, to_triton_name(name), gateway.repository, load)
            if not answers:
                load()
            (response,) = answers
            assert response.status_code == 200, response.text
            loads[name] = response.json()
        yield loads
        for name in (INT8, OPTIMIZED):
            http.post("/delete_model", json={"model_name": name})


def _embed(http, model: str, texts: list[str]) -> np.ndarray:
    response = http.post("/infer", json={"model_name": model, "text": texts})
    assert response.status_code == 200, response.text
    return np.asarray(response.json()["text_embeddings"], dtype=np.float32)


def test_loads_answer_with_the_variant_name_and_parity(variants):
    int8, optimized = variants[INT8], variants[OPTIMIZED]
    assert (int8["model_name"], int8["variant"], int8["status"]) == (INT8, "int8", "loaded")
    assert (optimized["model_name"], optimized["variant"]) == (OPTIMIZED, "optimized")
    assert 0.99 <= int8["parity_min_cosine"] < 0.9999
    assert optimized["parity_min_cosine"] >= 0.9999
    assert int8["embedding_dim"] == optimized["embedding_dim"] == 384


def test_each_serves_embeddings_within_its_threshold_of_pytorch(http, variants, minilm):
    reference = minilm.encode(SENTENCES)
    assert cosine_rows(_embed(http, INT8, SENTENCES), reference).min() >= 0.99
    assert cosine_rows(_embed(http, OPTIMIZED, SENTENCES), reference).min() >= 0.9999
    assert cosine_rows(_embed(http, MINILM, SENTENCES), reference).min() >= 0.9999


def test_the_openai_route_serves_a_variant(http, variants, minilm):
    response = http.post("/v1/embeddings", json={"model": INT8, "input": SENTENCES[:2]})
    assert response.status_code == 200, response.text
    served = np.asarray([item["embedding"] for item in response.json()["data"]])
    assert response.json()["model"] == INT8
    assert cosine_rows(served, minilm.encode(SENTENCES[:2])).min() >= 0.99


def test_listings_and_metrics_name_the_variants(http, variants):
    loaded = {m["model_name"]: m for m in http.get("/loaded_models").json()["models"]}
    assert loaded[INT8]["variant"] == "int8" and loaded[INT8]["triton_name"].endswith("---int8")
    assert loaded[OPTIMIZED]["variant"] == "optimized"
    assert loaded[INT8]["parity_min_cosine"] == variants[INT8]["parity_min_cosine"]
    assert loaded[INT8]["parity_mean_cosine"] >= loaded[INT8]["parity_min_cosine"]
    assert loaded[MINILM]["variant"] is None
    on_disk = {m["model_name"] for m in http.get("/repository_models").json()["models"]}
    assert {MINILM, INT8, OPTIMIZED} <= on_disk
    _embed(http, INT8, ["counted"])
    stats = {entry["name"]: entry for entry in http.get("/metrics").json()["model_stats"]}
    assert stats[INT8]["triton_name"] == "sentence-transformers--all-MiniLM-L6-v2---int8"
    assert stats[INT8]["inference_count"] >= 1


def test_the_cli_loads_a_variant_by_option(gateway, variants):
    result = subprocess.run(
        [sys.executable, "-m", "embedgate.api", "load", MINILM, "--quantize", "int8", "--quiet", "--url", gateway.url],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert (answer["model_name"], answer["status"]) == (INT8, "already_loaded")


def test_the_benchmark_compares_a_variant_with_its_model(gateway, variants, tmp_path):
    out = tmp_path / "compare.json"
    finished = subprocess.run(
        [
            sys.executable, "benchmark.py", "--url", gateway.url, "--model", INT8, "--compare-model", MINILM,
            "--model-repository", str(gateway.repository), "--payload", "batch", "--batch-size", "4",
            "--requests", "12", "--concurrency", "3", "--warmup", "0", "--inprocess", "--json", str(out),
        ],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert f"the same run against {MINILM}" in finished.stdout
    report = json.loads(out.read_text())
    # Each run measured its own model, in-process too: the variant's own ONNX file.
    assert report["load"]["successful_requests"] == report["compare"]["load"]["successful_requests"] == 12
    assert report["inprocess"]["onnx_file"].endswith("sentence-transformers--all-MiniLM-L6-v2---int8/1/model.onnx")
    assert report["compare"]["inprocess"]["onnx_file"].endswith("sentence-transformers--all-MiniLM-L6-v2/1/model.onnx")
    assert report["triton"]["inferences"] == report["compare"]["triton"]["inferences"] == 48
    int8, plain = report["comparison"]["models"]
    assert (int8["model"], plain["model"]) == (INT8, MINILM)
    assert int8["parity_min_cosine"] == variants[INT8]["parity_min_cosine"]
    assert int8["onnx_mb"] < plain["onnx_mb"]
    assert set(report["comparison"]["throughput_ratio"]) == {"server", "inprocess_plain", "inprocess_length_sorted"}


def test_unloading_a_variant_leaves_the_plain_model_serving(http, variants, minilm):
    assert http.post("/unload_model", json={"model_name": INT8}).status_code == 200
    response = http.post("/infer", json={"model_name": INT8, "text": ["x"]})
    assert (response.status_code, response.json()["error"]["code"]) == (409, "model_not_loaded")
    assert cosine_rows(_embed(http, MINILM, SENTENCES[:2]), minilm.encode(SENTENCES[:2])).min() >= 0.9999
    # Named directly, it loads again from the repository, without converting.
    again = http.post("/load_sentence_transformer_model", json={"model_name": INT8})
    assert again.status_code == 200, again.text
    assert (again.json()["status"], again.json()["converted"]) == ("loaded", False)


def test_deleting_a_variant_leaves_the_plain_model(http, gateway, variants, minilm):
    assert http.post("/delete_model", json={"model_name": OPTIMIZED}).status_code == 200
    assert not (gateway.repository / "sentence-transformers--all-MiniLM-L6-v2---optimized").exists()
    assert (gateway.repository / "sentence-transformers--all-MiniLM-L6-v2" / "metadata.json").is_file()
    response = http.post("/infer", json={"model_name": OPTIMIZED, "text": ["x"]})
    assert (response.status_code, response.json()["error"]["code"]) == (404, "model_not_found")
    on_disk = {m["model_name"] for m in http.get("/repository_models").json()["models"]}
    assert MINILM in on_disk and OPTIMIZED not in on_disk
    assert cosine_rows(_embed(http, MINILM, SENTENCES[:2]), minilm.encode(SENTENCES[:2])).min() >= 0.9999
    assert httpx.post(f"{gateway.url}/infer", json={"model_name": INT8, "text": ["still here"]}).status_code == 200
