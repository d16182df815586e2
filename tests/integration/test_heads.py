"""The heads over the architectures: each architecture the dense tests build
(tests/tiny_transformers.py) as a reranker (one label) and an NLI classifier (three), and as
a SPLADE model where it has a masked-LM head, converted and loaded by the real gateway and
tritonserver and compared with the library: ``CrossEncoder.predict`` on every route that
scores pairs (``/rerank``, ``/v1/rerank``, TEI's ``/rerank``, ``/predict``), pairs past the
model's max length cut as the library cuts them, and ``SparseEncoder.encode`` on ``/infer``.
BERT's heads are tests/integration/test_predict.py's and test_kinds.py's.

Every request sends texts no other request sent (and checks that none came from the
response cache): each score compared here was computed by the model.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests import tiny_models, tiny_transformers

from .conftest import models_loaded

ARCHITECTURES = [name for name in tiny_transformers.TRANSFORMERS if name != "bert"]
LABELS = tiny_models.NLI_LABELS
LONG = " ".join(["the quick brown fox jumps over the lazy dog"] * 12)
DOCUMENTS = ["the first document", "a man is eating food at the bank", "nothing like the query", LONG]


@pytest.fixture(scope="module", params=ARCHITECTURES)
def architecture(request, gateway, tmp_path_factory):
    """One architecture's heads built, converted and loaded (deleted after its tests): name ->
    (served model name, its library model)."""
    from sentence_transformers import CrossEncoder, SparseEncoder

    name = request.param
    root = tmp_path_factory.mktemp(f"heads-{name}")
    directories = {
        f"heads/{name}-reranker": tiny_models.cross_encoder_of(name, root / "reranker", seed=1),
        f"heads/{name}-nli": tiny_models.cross_encoder_of(name, root / "nli", seed=2, labels=LABELS),
    }
    if name in tiny_transformers.MASKED_LM:
        directories[f"heads/{name}-splade"] = tiny_models.sparse_encoder_of(name, root / "splade", seed=3)
    with models_loaded(gateway, directories) as answers:
        library = {
            model: (SparseEncoder if model.endswith("-splade") else CrossEncoder)(str(directory), device="cpu")
            for model, directory in directories.items()
        }
        yield name, answers, library


def model_of(architecture, head: str) -> tuple[str, object]:
    name, _, library = architecture
    model = f"heads/{name}-{head}"
    return model, library[model]


def computed(response):
    assert response.status_code == 200, response.text
    assert response.headers["x-cached-inputs"] == "0"
    return response


def scores_of(predictions: list[dict]) -> np.ndarray:
    by_label = {p["label"]: p["score"] for p in predictions}
    return np.asarray([by_label[label] for label in (LABELS if len(by_label) > 1 else ["LABEL_0"])])


def test_each_graph_is_fed_the_inputs_it_declares(architecture, repository):
    """The recorded inputs are the exported graph's own (onnxruntime's reading of it), the
    Triton config's the same: DeBERTa-v2 (v3's layout) reads no token types, which its
    tokenizer gives; XLM-RoBERTa's tokenizer gives none, BERT-style pairs' do."""
    import onnxruntime

    name, answers, _ = architecture
    for model, answer in answers.items():
        assert answer["kind"] == ("sparse_encoder" if model.endswith("-splade") else "cross_encoder"), answer
        published = repository / model.replace("/", "--")
        metadata = json.loads((published / "metadata.json").read_text())
        session = onnxruntime.InferenceSession(str(published / "1" / "model.onnx"))
        declared = [value.name for value in session.get_inputs()]
        assert metadata["graph_inputs"] == {published.name: declared}, model
        config = (published / "config.pbtxt").read_text()
        assert ("token_type_ids" in declared) == ('name: "token_type_ids"' in config)
        if name == "deberta-v2":
            assert declared == ["input_ids", "attention_mask"]


@pytest.mark.parametrize("route", ["/rerank", "/v1/rerank", "tei", "/predict"])
def test_a_reranker_scores_as_predict_on_every_route(http, architecture, route):
    model, reranker = model_of(architecture, "reranker")
    query = f"which document answers {route} on {architecture[0]}"
    if route == "/predict":
        items = [[query, document] for document in DOCUMENTS]
        answer = computed(http.post("/predict", json={"model": model, "inputs": items}))
        scores = [scores_of(predictions)[0] for predictions in answer.json()]
    elif route == "tei":
        answer = computed(http.post(f"/tei/{model}/rerank", json={"query": query, "texts": DOCUMENTS, "truncate": True}))
        by_index = {hit["index"]: hit["score"] for hit in answer.json()}
        scores = [by_index[i] for i in range(len(DOCUMENTS))]
    else:
        answer = computed(http.post(route, json={"model": model, "query": query, "documents": DOCUMENTS}))
        by_index = {hit["index"]: hit["relevance_score"] for hit in answer.json()["results"]}
        scores = [by_index[i] for i in range(len(DOCUMENTS))]
    expected = reranker.predict([[query, document] for document in DOCUMENTS])
    # The documents score differently (a graph that ignored them would not pass).
    assert np.ptp(expected) > 1e-3
    np.testing.assert_allclose(scores, expected, atol=1e-4)


def test_a_classifier_predicts_each_label_pairs_past_its_max_length_cut_as_the_library_cuts(http, architecture):
    model, classifier = model_of(architecture, "nli")
    text = f"a {architecture[0]} text alone"
    batch = [[text], ["a man is eating food", f"the man eats nothing, says {architecture[0]}"], [LONG, text],
             [text, LONG]]
    answer = computed(http.post("/predict", json={"model": model, "inputs": batch}))
    assert int(answer.headers["x-truncated-inputs"]) == 2
    expected = [classifier.predict(item[0] if len(item) == 1 else [item]).reshape(-1) for item in batch]
    assert np.abs(expected[0] - expected[1]).max() > 1e-3
    for predictions, want in zip(answer.json(), expected, strict=True):
        assert [p["score"] for p in predictions] == sorted((p["score"] for p in predictions), reverse=True)
        np.testing.assert_allclose(scores_of(predictions), want, atol=1e-4)


@pytest.mark.parametrize("architecture", [name for name in ARCHITECTURES if name in tiny_transformers.MASKED_LM],
                         indirect=True)
def test_splade_on_its_masked_lm_head_gives_encodes_weights(http, architecture):
    model, splade = model_of(architecture, "splade")
    texts = [f"hello {architecture[0]} world", "the quick brown fox jumps over the lazy dog, sparsely", LONG + " sparse"]
    rows = computed(http.post("/infer", json={"model_name": model, "text": texts})).json()["sparse_embeddings"]
    expected = splade.encode(texts, convert_to_sparse_tensor=False).numpy()
    # The texts' weights differ (a wrong row would not pass; ModernBERT's head leaves few weights zero).
    assert min(np.abs(expected[i] - expected[j]).max() for i in range(3) for j in range(i)) > 1e-2
    for row, want in zip(rows, expected, strict=True):
        assert row["indices"] == np.flatnonzero(want).tolist()
        # Within 1e-4 (ModernBERT's and DeBERTa-v2's weights of about 1.5 differ by up to 2.5e-5).
        np.testing.assert_allclose(row["values"], want[row["indices"]], rtol=0, atol=1e-4)
