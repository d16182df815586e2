"""Sentence-transformer embeddings end to end: HTTP -> gateway -> real tritonserver."""

from __future__ import annotations

import asyncio
import io
import time

import httpx
import numpy as np
import pytest

from tests.helpers import cosine_rows

from .conftest import MINILM

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "Triton batches requests dynamically.",
    "  padded with spaces  ",
    "Ünïcödé text, emoji 🚀, and 中文.",
    "short",
    "A much longer sentence " * 100,  # truncated to the model's max length
]


def test_load_converts_once_then_is_a_cheap_no_op(gateway, http, minilm_loaded):
    assert minilm_loaded["model_name"] == MINILM
    assert minilm_loaded["embedding_dim"] == 384
    log_start = len(gateway.log())
    again = http.post("/load_sentence_transformer_model", json={"model_name": MINILM})
    assert again.status_code == 200
    assert again.json()["status"] == "already_loaded" and again.json()["converted"] is False
    # Cheap: no conversion and no Triton load (each would log its steps).
    repeated = gateway.log()[log_start:]
    assert "converting" not in repeated and "loading into Triton" not in repeated, repeated


def computed(response):
    """A 200 whose every input the model computed (none from the response cache, which
    answers what the session's gateway saw before, in any test)."""
    assert response.status_code == 200, response.text
    assert response.headers["x-cached-inputs"] == "0", "answered from the response cache"
    return response


def test_batched_embeddings_match_pytorch(http, minilm_loaded, minilm):
    texts = [f"batched: {sentence}" for sentence in SENTENCES]
    response = computed(http.post("/infer", json={"model_name": MINILM, "text": texts}))
    served = np.asarray(response.json()["text_embeddings"], dtype=np.float32)
    reference = minilm.encode(texts, convert_to_numpy=True)
    assert served.shape == reference.shape == (len(SENTENCES), 384)
    assert cosine_rows(served, reference).min() >= 0.9999
    assert response.headers["x-truncated-inputs"] == "1"
    np.testing.assert_allclose(np.linalg.norm(served, axis=1), 1.0, atol=1e-4)


def test_binary_answers_carry_the_models_vectors(http, minilm_loaded, minilm):
    # Through the real server (the fast path answers /infer and TEI's /embed).
    texts = [f"binary: {sentence}" for sentence in SENTENCES[:4]]
    reference = minilm.encode(texts, convert_to_numpy=True)
    npy = computed(http.post("/infer", json={"model_name": MINILM, "text": texts}, headers={"accept": "application/x-npy"}))
    assert npy.headers["content-type"] == "application/x-npy" and float(npy.headers["x-total-time-ms"]) > 0
    served = np.load(io.BytesIO(npy.content), allow_pickle=False)
    assert served.dtype == np.float32 and cosine_rows(served, reference).min() >= 0.9999
    raw = http.post(
        f"/tei/{MINILM}/embed",
        json={"inputs": [f"raw: {text}" for text in texts]},
        headers={"accept": "application/octet-stream"},
    )
    assert raw.status_code == 200, raw.text
    assert (raw.headers["x-embedding-dtype"], raw.headers["x-embedding-shape"]) == ("float32", "4,384")
    rows = np.frombuffer(raw.content, dtype="<f4").reshape(4, 384)
    assert cosine_rows(rows, minilm.encode([f"raw: {text}" for text in texts])).min() >= 0.9999


def test_timing_headers_add_up_within_the_time_the_client_waited(http, minilm_loaded):
    # Texts of its own: ones seen before come from the response cache, with no tokenizing.
    texts = [f"timed: {sentence}" for sentence in SENTENCES]
    started = time.perf_counter()
    response = http.post("/infer", json={"model_name": MINILM, "text": texts})
    waited_ms = (time.perf_counter() - started) * 1000
    assert response.status_code == 200, response.text
    queue, tokenize, inference, total = (
        float(response.headers[f"x-{name}-time-ms"]) for name in ("queue", "tokenize", "inference", "total")
    )
    assert queue >= 0 and tokenize > 0 and inference > 0
    assert queue + tokenize + inference <= total + 0.02  # each header is rounded to 0.01 ms
    assert total <= waited_ms
    assert response.json()["processingTimeMs"] == pytest.approx(total, abs=0.006)


def test_single_sentence_matches_pytorch(http, minilm_loaded, minilm):
    for sentence in SENTENCES[:3]:
        sentence = f"alone: {sentence}"
        response = computed(http.post("/infer", json={"model_name": MINILM, "text": sentence}))
        served = np.asarray(response.json()["text_embeddings"])
        assert cosine_rows(served, minilm.encode([sentence]))[0] >= 0.9999


def test_requests_larger_than_the_triton_batch_are_split_and_kept_in_order(http, minilm_loaded, minilm):
    texts = [f"split sentence number {i} " + "word " * (i % 17) for i in range(600)]
    response = computed(http.post("/infer", json={"model_name": MINILM, "text": texts}))
    served = np.asarray(response.json()["text_embeddings"])
    assert cosine_rows(served, minilm.encode(texts)).min() >= 0.9999


async def test_concurrent_requests_share_triton_executions(gateway, minilm_loaded, minilm):
    # MiniLM is published for the gateway's batching (no Triton batcher): the coalescer
    # merges requests that wait together into one call, one Triton execution.
    def counts() -> tuple[int, int]:
        stats = httpx.get(f"{gateway.url}/metrics", timeout=10).json()["model_stats"]
        (entry,) = [s for s in stats if s["name"] == MINILM]
        return entry["inference_count"], entry["execution_count"]

    inferences_before, executions_before = counts()
    texts = [f"concurrent request {i} about topic {i % 7}" for i in range(96)]
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as client:
        responses = await asyncio.gather(
            *(client.post("/infer", json={"model_name": MINILM, "text": [t]}) for t in texts)
        )
    refused = [(r.status_code, r.text) for r in responses if r.status_code != 200]
    assert not refused, refused
    served = np.asarray([r.json()["text_embeddings"][0] for r in responses])
    # Each response carries its own input's embedding: no cross-talk within a batch.
    assert cosine_rows(served, minilm.encode(texts)).min() >= 0.9999

    inferences, executions = counts()
    assert inferences - inferences_before == len(texts)
    assert executions - executions_before < len(texts), "no two requests shared a Triton execution"


def test_metrics_show_the_model_under_its_user_name(http, minilm_loaded):
    stats = http.get("/metrics").json()["model_stats"]
    (entry,) = [s for s in stats if s["name"] == MINILM]
    assert entry["triton_name"] == "sentence-transformers--all-MiniLM-L6-v2"
    for key in ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss"):
        assert key in entry["inference_stats"]
    assert entry["average_batch_size"] >= 1.0


def test_listing_models(http, minilm_loaded):
    loaded = http.get("/loaded_models").json()["models"]
    assert [m["model_name"] for m in loaded] == [MINILM]
    on_disk = {m["model_name"]: m for m in http.get("/repository_models").json()["models"]}
    assert on_disk[MINILM]["loaded"] is True
    assert on_disk[MINILM]["normalized"] is True and on_disk[MINILM]["form"] == "python"


def test_errors_have_one_shape(http, minilm_loaded):
    cases = [
        (http.post("/infer", json={"model_name": "nobody/nothing", "text": ["a"]}), 404),
        (http.post("/infer", json={"model_name": MINILM, "text": []}), 400),
        (http.post("/infer", json={"model_name": "../../etc", "text": ["a"]}), 422),
        (http.post("/load_sentence_transformer_model", json={"model_name": "nobody/not-offline"}), 403),
        (http.post("/unload_model", json={"model_name": "nobody/nothing"}), 404),
    ]
    for response, status in cases:
        assert response.status_code == status, response.text
        assert response.json()["error"]["status"] == status
        assert "Traceback" not in response.text


async def test_concurrent_loads_of_a_local_directory_convert_once(gateway, http, tiny_dense):
    directory, library = str(tiny_dense[0]), tiny_dense[1]
    name = "local/tiny-copy"
    body = {"model_name": name, "model_path": directory}
    async with httpx.AsyncClient(base_url=gateway.url, timeout=300) as client:
        responses = await asyncio.gather(
            *(client.post("/load_sentence_transformer_model", json=body) for _ in range(3))
        )
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
    assert sorted(r.json()["converted"] for r in responses) == [False, False, True]
    served = http.post("/infer", json={"model_name": name, "text": SENTENCES[:2]}).json()["text_embeddings"]
    assert cosine_rows(served, library.encode(SENTENCES[:2])).min() >= 0.9999
    assert http.post("/delete_model", json={"model_name": name}).status_code == 200


def test_unload_delete_and_reload(http, tiny_dense):
    directory, library = str(tiny_dense[0]), tiny_dense[1]
    name = "local/tiny-reloaded"
    loaded = http.post("/load_sentence_transformer_model", json={"model_name": name, "model_path": directory})
    assert loaded.status_code == 200 and loaded.json()["converted"] is True, loaded.text
    assert http.post("/unload_model", json={"model_name": name}).status_code == 200
    not_loaded = http.post("/infer", json={"model_name": name, "text": ["a"]})
    assert not_loaded.status_code == 409 and not_loaded.json()["error"]["code"] == "model_not_loaded"
    assert name not in [m["model_name"] for m in http.get("/loaded_models").json()["models"]]
    assert name in [m["model_name"] for m in http.get("/repository_models").json()["models"]]

    assert http.post("/delete_model", json={"model_name": name}).status_code == 200
    assert http.post("/infer", json={"model_name": name, "text": ["a"]}).status_code == 404
    assert name not in [m["model_name"] for m in http.get("/repository_models").json()["models"]]

    reloaded = http.post("/load_sentence_transformer_model", json={"model_name": name, "model_path": directory})
    assert reloaded.status_code == 200 and reloaded.json()["converted"] is True
    served = http.post("/infer", json={"model_name": name, "text": SENTENCES[:2]}).json()["text_embeddings"]
    assert cosine_rows(served, library.encode(SENTENCES[:2])).min() >= 0.9999
    assert http.post("/delete_model", json={"model_name": name}).status_code == 200
