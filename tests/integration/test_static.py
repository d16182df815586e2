"""A static embedding model (``StaticEmbedding``, then Normalize) end to end: converted and
loaded by the real gateway, which computes it from the stored vectors with no Triton model,
against ``SentenceTransformer.encode`` through /infer, /v1/embeddings and TEI's /embed, with
prompts, precisions and dimensions. Static routes are computed, never read from the response
cache (every answer says so)."""

from __future__ import annotations

import numpy as np
import pytest

from tests import static_models
from tests.helpers import cosine_rows

NAME = "org/tiny-static"
PROMPTS = {"query": "query: ", "document": "passage: "}
# Past any transformer's window, its halves of other words: a static model cuts no text (its
# tokenizer has no limit), and a cut one would embed as its first half.
LONG = "the quick brown fox jumps over the lazy dog " * 60 + "stocks fell at the bank " * 120
TEXTS = ["hello world", "a man is eating food", "zebra xylophone", "", LONG, "stocks fell at the bank"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return static_models.static_model(tmp_path_factory.mktemp("static") / "model", dim=32, prompts=PROMPTS)


@pytest.fixture(scope="module")
def reference(model_dir):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(model_dir), device="cpu")


@pytest.fixture(scope="module")
def loaded(gateway, model_dir):
    with gateway.client(timeout=600) as http:
        response = http.post("/load_sentence_transformer_model", json={"model_name": NAME, "model_path": str(model_dir)})
        assert response.status_code == 200, response.text
        yield response.json()
        assert http.post("/delete_model", json={"model_name": NAME}).status_code == 200


def vectors(response) -> np.ndarray:
    assert response.status_code == 200, response.text
    assert response.headers["x-cached-inputs"] == "0"
    body = response.json()
    rows = body["text_embeddings"] if "text_embeddings" in body else [d["embedding"] for d in body["data"]]
    return np.asarray(rows, dtype=np.float64)


def assert_encoded(served: np.ndarray, expected: np.ndarray) -> None:
    # An empty text is an empty bag: zeros on both sides.
    empty = ~expected.any(axis=1)
    assert not served[empty].any()
    assert cosine_rows(served[~empty], expected[~empty]).min() >= 0.9999
    np.testing.assert_allclose(served, expected, atol=1e-5)


def test_it_is_computed_by_the_gateway_with_no_triton_model(http, gateway, loaded):
    assert (loaded["kind"], loaded["embedding_dim"], loaded["parity_min_cosine"] >= 0.9999) == ("sentence_transformer", 32, True)
    (listed,) = [m for m in http.get("/loaded_models").json()["models"] if m["model_name"] == NAME]
    assert listed["triton_parts"] == []
    assert listed["routes"] == [{"name": "", "tasks": ["default", "query", "document"], "runs_on": "gateway"}]
    published = gateway.repository / listed["triton_name"]
    assert not (published / "config.pbtxt").exists() and (published / "weights.npy").is_file()
    assert listed["triton_name"] not in {stats["triton_name"] for stats in http.get("/metrics").json()["model_stats"]}


def test_infer_matches_encode_in_a_batch_and_alone(http, loaded, reference):
    expected = reference.encode(TEXTS)
    assert_encoded(vectors(http.post("/infer", json={"model_name": NAME, "text": TEXTS})), expected)
    alone = [vectors(http.post("/infer", json={"model_name": NAME, "text": [text]})) for text in TEXTS[:3]]
    assert_encoded(np.concatenate(alone), expected[:3])
    response = http.post("/infer", json={"model_name": NAME, "text": [LONG]})
    assert response.headers["x-truncated-inputs"] == "0"


def test_prompts_and_tasks_match_encode_with_them(http, loaded, reference):
    texts = ["how do plants make food", "plants make food by photosynthesis"]
    named = http.post("/infer", json={"model_name": NAME, "text": texts, "prompt_name": "query"})
    assert_encoded(vectors(named), reference.encode(texts, prompt_name="query"))
    task = http.post("/infer", json={"model_name": NAME, "text": texts, "task": "document"})
    assert_encoded(vectors(task), reference.encode_document(texts))
    given = http.post("/infer", json={"model_name": NAME, "text": texts, "prompt": "search: "})
    assert_encoded(vectors(given), reference.encode(texts, prompt="search: "))


def test_openai_embeddings_with_an_input_type_and_dimensions(http, loaded, reference):
    texts = ["a lazy dog at the bank", "the model server embeds text"]
    body = {"model": NAME, "input": texts, "input_type": "query", "dimensions": 16, "encoding_format": "float"}
    response = http.post("/v1/embeddings", json=body)
    expected = reference.encode(texts, prompt_name="query", truncate_dim=16)
    assert_encoded(vectors(response), expected / np.linalg.norm(expected, axis=1, keepdims=True))
    tokens = sum(len(reference.tokenize(["query: " + text])["input_ids"]) for text in texts)
    assert response.json()["usage"]["prompt_tokens"] == tokens


def test_precisions_are_quantize_embeddings_with_the_calibrated_ranges(http, loaded, reference):
    from sentence_transformers.util.quantization import quantize_embeddings

    from embedgate.converters.calibration import calibration_texts

    # The ranges from the library: the model's embeddings of the calibration texts, no prompt.
    calibration = reference.encode(calibration_texts(), prompt="", normalize_embeddings=True)
    texts = ["quick brown text", "hello model", "search query document", "zebra xylophone bank"]
    floats = reference.encode(texts)
    for precision in ("int8", "uint8", "binary", "ubinary"):
        served = http.post("/infer", json={"model_name": NAME, "text": texts, "precision": precision})
        expected = quantize_embeddings(floats, precision=precision, calibration_embeddings=calibration)
        np.testing.assert_array_equal(vectors(served), expected)


def test_teis_embed(http, loaded, reference):
    texts = ["is this the bank", "embedding servers batch requests"]
    response = http.post(f"/tei/{NAME}/embed", json={"inputs": texts})
    assert response.status_code == 200, response.text
    assert_encoded(np.asarray(response.json()), reference.encode(texts))


# --- a static route beside a transformer's: queries computed by the gateway, documents by Triton

ROUTED = "org/tiny-static-queries"


@pytest.fixture(scope="module")
def routed(gateway, tmp_path_factory):
    from sentence_transformers import SentenceTransformer

    directory = static_models.static_query_model(tmp_path_factory.mktemp("static-queries") / "model")
    with gateway.client(timeout=600) as http:
        response = http.post("/load_sentence_transformer_model", json={"model_name": ROUTED, "model_path": str(directory)})
        assert response.status_code == 200, response.text
        yield SentenceTransformer(str(directory), device="cpu")
        assert http.post("/delete_model", json={"model_name": ROUTED}).status_code == 200


def test_a_static_query_route_beside_a_transformer_document_route(http, routed):
    (listed,) = [m for m in http.get("/loaded_models").json()["models"] if m["model_name"] == ROUTED]
    assert listed["routes"] == [
        {"name": "document", "tasks": ["default", "document"], "runs_on": "triton"},
        {"name": "query", "tasks": ["query"], "runs_on": "gateway"},
    ]
    assert listed["triton_parts"] == [listed["triton_name"]]
    for task, encode in (("query", routed.encode_query), ("document", routed.encode_document), (None, routed.encode)):
        # Texts of each task's own: no task is the document route, whose cache would answer the same texts.
        texts = [f"how do plants make food {task}", f"the lazy dog at the bank {task}"]
        body = {"model_name": ROUTED, "text": texts, **({"task": task} if task else {})}
        assert cosine_rows(vectors(http.post("/infer", json=body)), encode(texts)).min() >= 0.9999, task
