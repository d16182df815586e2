"""TEI's API through the real gateway and tritonserver, called as TEI's clients call it, each
answer checked against the library: huggingface_hub's ``InferenceClient`` (the client itself:
``feature_extraction``, ``sentence_similarity``, ``text_classification``, ``health_check``),
and the exact requests of LangChain's ``HuggingFaceEndpointEmbeddings`` (``InferenceClient``'s
``feature_extraction`` on the base URL) and of LlamaIndex's ``TextEmbeddingsInference`` and TEI
reranker (``POST {base}/embed``, ``{base}/rerank`` with httpx) with their parsing of the answers
(neither package is a dependency of the project). Every text is one this module alone sends,
and the first answers are checked to be computed (``x-cached-inputs: 0``), not cached.
"""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
import pytest

from tests import tiny_models
from tests.helpers import cosine_rows

from .conftest import MINILM, models_loaded

RERANKER = "org/tei-reranker"
CLASSIFIER = "org/tei-classifier"
SPLADE = "org/tei-splade"
COLBERT = "org/tei-colbert"
TEXTS = ["TEI clients embed this sentence.", "A second text, sent through TEI's API.", "naïve café, TEI"]
QUERY = "which fox jumps over the dog in TEI's tests?"
DOCUMENTS = ["the quick brown fox jumps over the lazy dog (TEI).", "stocks fell at the bank (TEI)", "hello TEI"]
LONG = " ".join(["the quick brown fox jumps over the lazy dog"] * 40)


@pytest.fixture(scope="module")
def models(gateway, tmp_path_factory):
    root = tmp_path_factory.mktemp("tei")
    directories = {
        RERANKER: tiny_models.cross_encoder(root / "reranker"),
        CLASSIFIER: tiny_models.classifier(root / "classifier"),
        SPLADE: tiny_models.sparse_encoder(root / "splade"),
        COLBERT: tiny_models.multi_vector_model(root / "colbert"),
    }
    with models_loaded(gateway, directories):
        yield directories


@pytest.fixture(scope="module")
def library(models):
    from sentence_transformers import CrossEncoder, MultiVectorEncoder, SparseEncoder

    return {
        RERANKER: CrossEncoder(str(models[RERANKER]), device="cpu"),
        CLASSIFIER: CrossEncoder(str(models[CLASSIFIER]), device="cpu"),
        SPLADE: SparseEncoder(str(models[SPLADE]), device="cpu"),
        COLBERT: MultiVectorEncoder(str(models[COLBERT]), device="cpu"),
    }


@pytest.fixture(autouse=True)
def hub_client_may_call_the_gateway(monkeypatch):
    """huggingface_hub refuses every request in offline mode (the tests' setting), the
    gateway's on 127.0.0.1 included. Its clients here are given the gateway's base URL, which
    is all they call (a model named by URL needs nothing from a hub)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


def base(gateway, model: str) -> str:
    return f"{gateway.url}/tei/{model}"


def computed(response: httpx.Response) -> httpx.Response:
    assert response.status_code == 200, response.text
    assert response.headers["x-cached-inputs"] == "0", "answered from the cache, not computed"
    return response


def tei_error(response: httpx.Response, status: int, error_type: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "error_type"} and body["error_type"] == error_type, body
    return body["error"]


# --- huggingface_hub's InferenceClient


def test_inference_clients_feature_extraction_is_the_librarys_encode(gateway, minilm_loaded, minilm):
    from huggingface_hub import InferenceClient

    client = InferenceClient(base_url=base(gateway, MINILM))
    texts = [f"{text} (feature_extraction)" for text in TEXTS]
    served = client.feature_extraction(texts)
    assert served.shape == (3, 384) and served.dtype == np.float32
    assert cosine_rows(served, minilm.encode(texts)).min() >= 0.9999
    # Its options: TEI's (dimensions: the first ones, then unit length, as encode(truncate_dim=...)).
    short = client.feature_extraction(texts[0] + " short", dimensions=128, truncate=True, truncation_direction="right")
    want = minilm.encode([texts[0] + " short"], truncate_dim=128, normalize_embeddings=True)
    assert short.shape == (1, 128) and cosine_rows(short, want).min() >= 0.9999
    assert np.linalg.norm(short) == pytest.approx(1.0, abs=1e-5)
    # health_check: GET {base}/health, offered for huggingface_hub's own provider.
    assert InferenceClient(model=base(gateway, MINILM), provider="hf-inference").health_check() is True


def test_inference_clients_sentence_similarity_is_the_librarys_cosine(gateway, minilm_loaded, minilm):
    from huggingface_hub import InferenceClient
    from sentence_transformers import util

    client = InferenceClient(base_url=base(gateway, MINILM))
    source, others = "How do TEI clients compare sentences?", [f"{text} (similarity)" for text in TEXTS]
    served = client.sentence_similarity(source, other_sentences=others)
    want = util.cos_sim(minilm.encode([source]), minilm.encode(others))[0].numpy()
    np.testing.assert_allclose(served, want, atol=1e-4)
    # The same through /similarity, with TEI's parameters (texts of its own: computed, not cached).
    source, others = source + "!", [f"{text} again" for text in others]
    body = {"inputs": {"source_sentence": source, "sentences": others}, "parameters": {"truncate": True}}
    direct = computed(httpx.post(f"{base(gateway, MINILM)}/similarity", json=body, timeout=60)).json()
    np.testing.assert_allclose(direct, util.cos_sim(minilm.encode([source]), minilm.encode(others))[0], atol=1e-4)


def test_inference_clients_text_classification_is_the_librarys_predict(gateway, models, library):
    from huggingface_hub import InferenceClient

    # A reranker's root is /rerank (as TEI's): text_classification names /predict itself.
    client = InferenceClient(base_url=f"{base(gateway, RERANKER)}/predict")
    text = "TEI classifies this sentence."
    answer = client.text_classification(text)
    assert answer.label == "LABEL_0"
    assert answer.score == pytest.approx(float(library[RERANKER].predict(text)), abs=1e-4)


def test_a_tei_clients_class_probabilities_are_teis_softmax_of_the_librarys_logits(gateway, models, library):
    """TEI answers /predict with a softmax over the labels (a sigmoid for one) unless
    raw_scores: a TEI client reads probabilities that sum to 1, whatever activation the
    model's CrossEncoder applies (an NLI classifier's is none: its logits)."""
    import torch
    from huggingface_hub import InferenceClient

    client = InferenceClient(base_url=f"{base(gateway, CLASSIFIER)}/predict")
    texts = ["TEI reads these as probabilities.", "A second text TEI classifies.", "Raw logits, please (TEI).",
             "The native route's scores, for TEI's test."]
    logits = np.stack([library[CLASSIFIER].predict(text, activation_fn=torch.nn.Identity()) for text in texts])
    labels = list(tiny_models.NLI_LABELS)
    probabilities = [np.exp(row - row.max()) / np.exp(row - row.max()).sum() for row in logits]
    # huggingface_hub's client reads the best label of one input.
    best = client.text_classification(texts[0])
    assert (best.label, best.score) == (labels[int(np.argmax(probabilities[0]))], pytest.approx(max(probabilities[0]), abs=1e-4))
    # Every label's, in TEI's shape, for a batch: each input's sum to 1.
    answer = computed(httpx.post(f"{base(gateway, CLASSIFIER)}/predict", json={"inputs": [[texts[1]]]}, timeout=60))
    for row, expected in zip(answer.json(), probabilities[1:2]):
        by_label = {item["label"]: item["score"] for item in row}
        assert sum(by_label.values()) == pytest.approx(1.0, abs=1e-5)
        assert [by_label[label] for label in labels] == pytest.approx(list(expected), abs=1e-4)
    raw = httpx.post(f"{base(gateway, CLASSIFIER)}/predict", json={"inputs": texts[2], "raw_scores": True}, timeout=60)
    by_label = {item["label"]: item["score"] for item in computed(raw).json()}
    assert [by_label[label] for label in labels] == pytest.approx(list(logits[2]), abs=1e-4)
    # The native /predict keeps CrossEncoder.predict's scores: here, the logits.
    native = httpx.post(f"{gateway.url}/predict", json={"model": CLASSIFIER, "inputs": texts[3]}, timeout=60)
    by_label = {item["label"]: item["score"] for item in computed(native).json()}
    assert [by_label[label] for label in labels] == pytest.approx(list(logits[3]), abs=1e-4)


# --- LangChain's HuggingFaceEndpointEmbeddings and LlamaIndex's TextEmbeddingsInference, as they call


def test_langchains_endpoint_embeddings_request_and_parsing(gateway, minilm_loaded, minilm):
    """``HuggingFaceEndpointEmbeddings(model=<base URL>)`` (langchain-huggingface up to 1.2.1;
    1.2.2 takes hub ids only): newlines replaced, ``InferenceClient(model=...)``'s
    ``feature_extraction(text=texts, **model_kwargs)``, then ``.tolist()``; async the same."""
    from huggingface_hub import AsyncInferenceClient, InferenceClient

    url = base(gateway, MINILM)
    texts = [f"{text}\n(LangChain)" for text in TEXTS]
    sent = [text.replace("\n", " ") for text in texts]
    model_kwargs = {"normalize": True, "truncate": True}
    documents = InferenceClient(model=url, token=None, provider=None).feature_extraction(text=sent, **model_kwargs)
    documents = documents.tolist()
    assert isinstance(documents, list) and all(len(row) == 384 for row in documents)
    assert cosine_rows(documents, minilm.encode(sent)).min() >= 0.9999

    async def aembed_query() -> list[float]:
        client = AsyncInferenceClient(model=url, token=None, provider=None)
        return (await client.feature_extraction(text=["query (LangChain, async)"])).tolist()[0]

    query = asyncio.run(aembed_query())
    assert cosine_rows([query], minilm.encode(["query (LangChain, async)"])).min() >= 0.9999


def test_llama_indexs_embeddings_and_reranker_requests_and_parsing(gateway, minilm_loaded, minilm, models, library):
    """LlamaIndex's ``TextEmbeddingsInference``: ``POST {base_url}/embed`` with
    ``{"inputs": texts, "truncate": truncate_text}``, the JSON list as the embeddings; its TEI
    reranker: ``POST {base_url}/rerank`` with ``{"query", "texts"}``, each rank's ``index`` and
    ``score`` put on its node, then sorted."""
    headers = {"Content-Type": "application/json"}
    texts = [f"{text} (LlamaIndex)" for text in TEXTS]
    response = computed(httpx.post(f"{base(gateway, MINILM)}/embed", headers=headers,
                                   json={"inputs": texts, "truncate": True}, timeout=60))
    embeddings = response.json()
    assert cosine_rows(embeddings, minilm.encode(texts)).min() >= 0.9999
    query_embedding = httpx.post(f"{base(gateway, MINILM)}/embed", headers=headers,
                                 json={"inputs": ["a query (LlamaIndex)"], "truncate": True}, timeout=60).json()[0]
    assert cosine_rows([query_embedding], minilm.encode(["a query (LlamaIndex)"])).min() >= 0.9999

    ranks = computed(httpx.post(f"{base(gateway, RERANKER)}/rerank", headers=headers,
                                json={"query": QUERY, "texts": DOCUMENTS}, timeout=60)).json()
    scores = [0.0] * len(DOCUMENTS)
    for rank in ranks:
        scores[rank["index"]] = float(rank["score"])
    np.testing.assert_allclose(scores, library[RERANKER].predict([(QUERY, d) for d in DOCUMENTS]), atol=1e-4)
    assert [rank["score"] for rank in ranks] == sorted(scores, reverse=True)


# --- every other route, against the library


def test_rerank_raw_scores_and_text(gateway, models, library):
    import torch

    body = {"query": QUERY + "?", "texts": DOCUMENTS, "raw_scores": True, "return_text": True}
    ranks = computed(httpx.post(f"{base(gateway, RERANKER)}/rerank", json=body, timeout=60)).json()
    logits = library[RERANKER].predict([(QUERY + "?", d) for d in DOCUMENTS], activation_fn=torch.nn.Identity())
    for rank in ranks:
        assert rank["text"] == DOCUMENTS[rank["index"]]
        assert rank["score"] == pytest.approx(float(logits[rank["index"]]), abs=1e-4)
    # The base URL of a reranker is its /rerank, as TEI's.
    root = httpx.post(base(gateway, RERANKER), json={"query": QUERY + "!", "texts": DOCUMENTS[:1]}, timeout=60)
    assert root.status_code == 200 and set(root.json()[0]) == {"index", "score"}


def test_embed_sparse_has_encodes_non_zero_weights(gateway, models, library):
    texts = [f"{text} (sparse)" for text in TEXTS]
    rows = computed(httpx.post(f"{base(gateway, SPLADE)}/embed_sparse", json={"inputs": texts}, timeout=60)).json()
    expected = library[SPLADE].encode(texts, convert_to_sparse_tensor=False).numpy()
    assert len({tuple(np.flatnonzero(want)) for want in expected}) == len(texts)
    for row, want in zip(rows, expected):
        indices = [value["index"] for value in row]
        assert indices == np.flatnonzero(want).tolist()
        np.testing.assert_allclose([value["value"] for value in row], want[indices], rtol=1e-4, atol=1e-5)
    root = httpx.post(base(gateway, SPLADE), json={"inputs": texts[0]}, timeout=60)
    assert root.status_code == 200 and root.json() == rows[:1]
    # A sparse encoder's weights are no dense embedding: refused, saying where to go.
    refused = httpx.post(f"{base(gateway, SPLADE)}/embed", json={"inputs": "a"}, timeout=60)
    assert "/embed_sparse" in tei_error(refused, 424, "Backend")


def test_embed_all_is_a_multi_vector_models_token_vectors(gateway, models, library):
    model = library[COLBERT]
    texts = [f"{text} (token vectors)" for text in TEXTS]
    for prompt_name, expected in ((None, model.encode(texts)), ("query", model.encode_query(texts))):
        body = {"inputs": texts, **({"prompt_name": prompt_name} if prompt_name else {})}
        served = computed(httpx.post(f"{base(gateway, COLBERT)}/embed_all", json=body, timeout=60)).json()
        for ours, theirs in zip(served, expected):
            ours, theirs = np.asarray(ours), np.asarray(theirs)
            assert ours.shape == theirs.shape and cosine_rows(ours, theirs).min() >= 0.9999
    refused = httpx.post(f"{base(gateway, MINILM)}/embed_all", json={"inputs": "a"}, timeout=60)
    assert "/embed and /similarity" in tei_error(refused, 424, "Backend")


def test_tokenize_and_decode_with_the_models_tokenizer(gateway, minilm_loaded, minilm):
    text = "naïve café: TEI tokenizes this"
    response = httpx.post(f"{base(gateway, MINILM)}/tokenize", json={"inputs": [text, LONG]}, timeout=60)
    assert response.status_code == 200, response.text
    tokens, long_tokens = response.json()
    assert [token["id"] for token in tokens] == minilm.tokenizer(text)["input_ids"]
    assert tokens[0] == {"id": 101, "text": "[CLS]", "special": True, "start": None, "stop": None}
    for token in tokens[1:-1]:
        assert text.encode()[token["start"] : token["stop"]].decode() == token["text"]
    assert len(long_tokens) > minilm.max_seq_length  # in full: what would be cut shows
    ids = [token["id"] for token in tokens]
    decoded = httpx.post(f"{base(gateway, MINILM)}/decode", json={"ids": ids}, timeout=60).json()
    assert decoded == [minilm.tokenizer.decode(ids, skip_special_tokens=True)]


def test_info_and_health(gateway, minilm_loaded, models):
    info = httpx.get(f"{base(gateway, MINILM)}/info", timeout=60).json()
    assert info["model_id"] == MINILM and info["model_type"] == {"embedding": {"pooling": "model"}}
    assert info["max_input_length"] == 256 and info["auto_truncate"] is True
    reranker = httpx.get(f"{base(gateway, RERANKER)}/info", timeout=60).json()
    assert reranker["model_type"] == {"reranker": {"id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}}}
    assert httpx.get(f"{base(gateway, SPLADE)}/health", timeout=60).status_code == 200
    tei_error(httpx.get(f"{gateway.url}/tei/org/not-loaded/health", timeout=60), 404, "Validation")


def test_teis_errors_and_statuses(gateway, minilm_loaded, models):
    url = base(gateway, MINILM)
    tei_error(httpx.post(f"{url}/embed", json={"inputs": []}, timeout=60), 400, "Empty")
    # An input past the model's 256 tokens: cut by default, refused where cutting is.
    assert httpx.post(f"{url}/embed", json={"inputs": LONG}, timeout=60).headers["x-truncated-inputs"] == "1"
    message = tei_error(httpx.post(f"{url}/embed", json={"inputs": LONG, "truncate": False}, timeout=60),
                        422, "Validation")
    assert "256 tokens" in message
    too_many = ["x"] * (gateway_limit := 2048) + ["y"]
    assert "maximum allowed batch size 2048" in tei_error(
        httpx.post(f"{url}/embed", json={"inputs": too_many}, timeout=60), 422, "Validation"
    )
    assert gateway_limit
    rerank = httpx.post(f"{url}/rerank", json={"query": "q", "texts": ["a"]}, timeout=60)
    assert "/embed" in tei_error(rerank, 424, "Backend")
    tei_error(httpx.post(f"{gateway.url}/tei/org/not-loaded/embed", json={"inputs": "a"}, timeout=60), 404,
              "Validation")
    # The native routes of the same names keep their shapes.
    assert httpx.get(f"{gateway.url}/health", timeout=60).json() == {"status": "live"}
    native = httpx.post(f"{gateway.url}/rerank", json={"model": RERANKER, "query": QUERY, "documents": ["a"]},
                        timeout=60)
    assert native.status_code == 200 and set(native.json()) == {"model", "results", "usage"}
