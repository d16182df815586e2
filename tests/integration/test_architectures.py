"""The architectures people serve, end to end: each tiny model (tests/tiny_models.py) is
converted and loaded by the real gateway and tritonserver, and what it serves is compared
with ``SentenceTransformer.encode`` (and ``encode_query`` / ``encode_document``: an
EmbeddingGemma-style Gemma 3 with bidirectional attention has prompts for each). A model
with code of its own (its modeling file and ``auto_map``: an architecture transformers does
not have) is one of them, loaded with ``trust_remote_code`` (this module's gateway allows
it); without it, or where the server does not allow it, its load is a 403.

Each batch mixes lengths: a single word, one text longer than max_seq_length (cut as
encode cuts it) and one longer than half the pack width. A batch whose texts all fit in
the pack width runs packed, several texts to a row, where the model has a packed graph;
a batch with a longer text runs one text per row. Each text alone must embed as it does
in a batch: the gateway right-pads, whatever side the model's tokenizer pads on.

The gateway of this module has the response cache off (and every test sends texts of its
own, and every answer says no input came from the cache): each vector compared here was
computed by the model.
"""

from __future__ import annotations

import numpy as np
import pytest

from embedgate.contract.spec import PACKED_ONNX_FILE, TORCH_FILE, TritonConfigOptions
from tests import remote_code_model, tiny_models
from tests.helpers import cosine_rows

from .conftest import start_gateway

THRESHOLD = 0.9999
PACK_WIDTH = TritonConfigOptions().pack_width
# Only mean pooling (then Dense, Normalize) can run packed, by a model that takes position ids.
PACKED = {"mean"}
# name -> (builder, pooling); these load with trust_remote_code.
ARCHITECTURES = {
    **tiny_models.ARCHITECTURES,
    "own-code": (remote_code_model.remote_code_model, "mean, the model's own code without position ids"),
}
TRUSTED = {"own-code"}
# One single word per variant of the texts (Served.texts).
SINGLE_WORDS = ("hello", "world", "query")
WORDS = (
    "embedding servers batch requests of different lengths while the quick brown fox jumps over the lazy dog "
    "and a man is eating food at the bank"
).split()


@pytest.fixture(scope="module")
def models_root(tmp_path_factory):
    return tmp_path_factory.mktemp("architectures")


@pytest.fixture(scope="module")
def uncached(models_root):
    """A gateway of this module's own, with no response cache; loads may run a model's own code."""
    gateway = start_gateway(
        models_root / "repository", models_root / "gateway.log", response_cache_mb="0", allow_trust_remote_code="true"
    )
    yield gateway
    gateway.stop()


@pytest.fixture
def http(uncached):
    with uncached.client() as client:
        yield client


def test_no_answer_here_can_come_from_the_cache(http):
    assert http.get("/metrics").json()["response_cache"] is None


@pytest.fixture(scope="module", params=list(ARCHITECTURES))
def architecture(request, uncached, models_root):
    """One architecture built, converted and loaded (once for all its tests), deleted after."""
    name = request.param
    build, pooling = ARCHITECTURES[name]
    model_dir = build(models_root / name)
    model_name = f"arch/{name}"
    with uncached.client(timeout=600) as http:
        body = {"model_name": model_name, "model_path": str(model_dir), "trust_remote_code": name in TRUSTED}
        response = http.post("/load_sentence_transformer_model", json=body)
        assert response.status_code == 200, response.text
        assert response.json()["parity_min_cosine"] >= THRESHOLD
        (listed,) = [m for m in http.get("/loaded_models").json()["models"] if m["model_name"] == model_name]
        yield Served(name, model_name, pooling, _reference(model_dir), uncached.repository / listed["triton_name"])
        # One architecture at a time in memory.
        assert http.post("/delete_model", json={"model_name": model_name}).status_code == 200


class Served:
    def __init__(self, name, model_name, pooling, reference, published):
        self.name = name
        self.model_name = model_name
        self.pooling = pooling
        self.reference = reference
        self.published = published

    def tokens(self, text: str) -> int:
        return len(self.reference.tokenizer(text)["input_ids"])

    def text_of(self, tokens: int, start: int = 0) -> str:
        """A text of at least ``tokens`` tokens (specials included) in this model's
        tokenizer, its words taken from ``start`` on."""
        words: list[str] = []
        while not words or self.tokens(" ".join(words)) < tokens:
            words.append(WORDS[(start + len(words)) % len(WORDS)])
        return " ".join(words)

    def texts(self, variant: int = 0) -> dict[str, list[str]]:
        """Two batches: one whose texts all fit in the pack width, one with a text past
        max_seq_length. Each ``variant`` has texts of its own, of the same shapes, so that
        no test is answered from the cache with what another sent."""
        single_word = SINGLE_WORDS[variant]
        # Longer than half the pack width: in ModernBERT it reaches past the sliding window.
        medium = self.text_of(PACK_WIDTH // 2 + 6, start=variant)
        unicode = ["  Ünïcödé façade, naïve café  ", "Ünïcödé café at the façade", " naïve façade of a café "][variant]
        short = [single_word, f"The quick brown fox {variant}.", medium, unicode, f"a man eats food {variant}"]
        assert max(self.tokens(text) for text in short) <= PACK_WIDTH, "this batch must run packed"
        long = self.text_of(self.reference.max_seq_length + 16, start=2 * variant + 1)
        mixed = [long, single_word, medium, f"Hello world {variant}!", f"stocks fell at the bank {variant}"]
        return {"packed": short, "one text per row": mixed}


def _reference(model_dir):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(model_dir), device="cpu", trust_remote_code=True)


def embeddings(response) -> np.ndarray:
    """The vectors of an answer the model computed (none of its inputs from the cache)."""
    assert response.status_code == 200, response.text
    assert response.headers["x-cached-inputs"] == "0", "an input was answered from the response cache"
    body = response.json()
    rows = body["text_embeddings"] if "text_embeddings" in body else [d["embedding"] for d in body["data"]]
    return np.asarray(rows, dtype=np.float64)


def assert_texts_differ(expected: np.ndarray, what: str) -> None:
    """The model's own vectors of different texts differ: a model whose every text embeds
    alike would let a wrong mask, position or pooled token pass."""
    unit = expected / np.linalg.norm(expected, axis=1, keepdims=True)
    similar = unit @ unit.T - np.eye(len(unit))
    assert similar.max() < 0.99, f"{what}: texts embed alike (cosine {similar.max():.4f})"


def assert_matches(served: np.ndarray, expected: np.ndarray, what: str) -> None:
    cosines = cosine_rows(served, expected)
    assert cosines.min() >= THRESHOLD, f"{what}: cosines {np.round(cosines, 6).tolist()}"


def test_a_packed_graph_is_published_for_mean_pooling_only(architecture):
    # GPU instances run the TorchScript graph (converters/library/gpu.py): no packed onnxruntime graph.
    on_gpu = (architecture.published / "1" / TORCH_FILE).is_file()
    assert (architecture.published / "1" / PACKED_ONNX_FILE).is_file() == (architecture.pooling in PACKED and not on_gpu)


def test_its_recorded_inputs_are_its_graphs_own(architecture):
    """The inputs the gateway sends are those the exported graph declares (onnxruntime's
    reading of it), in its config too."""
    import json

    import onnxruntime

    published = architecture.published
    session = onnxruntime.InferenceSession(str(published / "1" / "model.onnx"))
    declared = [value.name for value in session.get_inputs()]
    assert json.loads((published / "metadata.json").read_text())["graph_inputs"] == {published.name: declared}
    config = (published / "config.pbtxt").read_text()
    assert all(f'name: "{name}"' in config for name in declared)


def test_a_batch_matches_encode(http, architecture):
    for batch, texts in architecture.texts().items():
        served = embeddings(http.post("/infer", json={"model_name": architecture.model_name, "text": texts}))
        expected = architecture.reference.encode(texts)
        assert_texts_differ(expected, f"{architecture.name}, {batch}")
        assert_matches(served, expected, f"{architecture.name}, {batch}")


def test_each_text_alone_matches_encode(http, architecture):
    texts = architecture.texts(variant=1)["one text per row"]
    expected = architecture.reference.encode(texts)
    alone = [http.post("/infer", json={"model_name": architecture.model_name, "text": [text]}) for text in texts]
    served = np.concatenate([embeddings(response) for response in alone])
    assert_matches(served, expected, f"{architecture.name}, alone")


def test_the_openai_endpoint_serves_the_same_vectors(http, architecture):
    texts = architecture.texts(variant=2)["one text per row"]
    body = {"model": architecture.model_name, "input": texts, "encoding_format": "float"}
    response = http.post("/v1/embeddings", json=body)
    assert_matches(embeddings(response), architecture.reference.encode(texts), f"{architecture.name}, /v1/embeddings")
    tokens = sum(min(architecture.tokens(text), architecture.reference.max_seq_length) for text in texts)
    assert response.json()["usage"]["prompt_tokens"] == tokens


def test_a_tasks_texts_are_encode_querys_and_encode_documents(http, architecture):
    """The task's prompt (EmbeddingGemma's "task: search result | query: ", or an empty one)
    goes before each text, as encode_query and encode_document put it."""
    texts = architecture.texts()["one text per row"]
    reference = architecture.reference
    for task, encode in (("query", reference.encode_query), ("document", reference.encode_document)):
        body = {"model_name": architecture.model_name, "text": texts, "task": task}
        assert_matches(embeddings(http.post("/infer", json=body)), encode(texts), f"{architecture.name}, {task}")


def test_a_model_with_its_own_code_is_refused_without_trust_remote_code(uncached, gateway, models_root):
    """Where the request does not set it (a 403 that names the code and says how), and where
    the server does not allow it (the session's gateway: a 403 before anything runs)."""
    model_dir = remote_code_model.remote_code_model(models_root / "own-code-refused", seed=1)
    body = {"model_name": "arch/own-code-refused", "model_path": str(model_dir)}
    with uncached.client(timeout=600) as http:
        refused = http.post("/load_sentence_transformer_model", json=body)
        assert refused.status_code == 403, refused.text
        error = refused.json()["error"]
        assert error["code"] == "trust_remote_code_required"
        assert "modeling_tiny_rotary.py" in error["message"] and "trust_remote_code" in error["message"]
        assert all(m["model_name"] != body["model_name"] for m in http.get("/loaded_models").json()["models"])
    with gateway.client(timeout=600) as http:
        forbidden = http.post("/load_sentence_transformer_model", json={**body, "trust_remote_code": True})
        assert forbidden.status_code == 403 and forbidden.json()["error"]["code"] == "forbidden", forbidden.text
