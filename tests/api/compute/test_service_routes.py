"""The embedding service runs each route of a model on its own: a routed model's tasks on
their Triton versions, a static route in the gateway with no Triton call, a multi-vector
model's tasks tokenized their own way and answered as kept token vectors or MaxSim; a batch
job's requests of several routes answered together, each as online."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from embedgate.api.compute.backend.triton import TritonBackend
from embedgate.api.compute.requests.asks import Ask, Options, Output
from embedgate.api.compute.requests.kinds.multi_vector import MultiVectorKind
from embedgate.api.compute.requests.prompts import PromptChoice
from embedgate.api.compute.requests.routes import Route
from embedgate.api.compute.requests.served import ServedModel
from embedgate.api.compute.requests.static import TokenWeights
from embedgate.api.compute.service import EmbeddingService
from embedgate.api.errors import UnknownRoute, WrongModelKind
from embedgate.api.settings import Settings
from embedgate.contract.kinds.multi_vector import MultiVectorInfo, MultiVectorTask, QueryExpansion
from embedgate.contract.preprocess.text import TextTokenizer
from tests.api.conftest import fake_metadata


class RoutesClient:
    """Records each call's model, version and output; a row's answer is [its version, its
    first token id] (per token for per-token outputs: [position, token id])."""

    def __init__(self):
        self.calls = []

    async def infer(self, triton_name, tensors, output, *, timeout_s, version=""):
        self.calls.append((triton_name, version, output))
        ids = tensors["input_ids"]
        if output == "token_embeddings":
            positions = np.broadcast_to(np.arange(ids.shape[1]), ids.shape)
            return np.stack([positions, ids], axis=2).astype(np.float32) + 1.0
        return np.stack([np.full(len(ids), float(version or 0)), ids[:, 1]], axis=1).astype(np.float32)


@pytest.fixture
def service():
    service = EmbeddingService(Settings(response_cache_mb=0), TritonBackend(RoutesClient()))
    yield service
    service.close()


@pytest.fixture
def tokenizer_file(minilm_path) -> Path:
    return Path(minilm_path) / "tokenizer.json"


def routed(tokenizer_file: Path) -> ServedModel:
    tokenizer = TextTokenizer(tokenizer_file, 32)
    # A static route: a weight per vocabulary token (MiniLM's vocabulary).
    weights = np.zeros(30522, dtype=np.float32)
    weights[[2023, 3231]] = [1.5, 2.5]  # "this", "test"
    routes = [
        Route("document", ("default", "document"), tokenizer, "m", "1"),
        Route("query", ("query",), tokenizer, "m", "2"),
        Route("static", ("unused",), TextTokenizer(tokenizer_file, 32, add_special_tokens=False), "m", step=TokenWeights(weights)),
    ]
    metadata = fake_metadata("org/routed", embedding_dim=2, normalized=True, prompts={"query": "q: ", "document": ""})
    return ServedModel("org/routed", "m", metadata, tokenizer, routes=routes)


async def test_each_task_runs_on_its_routes_version_with_its_prompt(service, tokenizer_file):
    model = routed(tokenizer_file)
    query = await service.answer(model, Ask(Output.EMBED, ["a", "b"], PromptChoice(task="query")), timeout_s=5)
    default = await service.answer(model, Ask(Output.EMBED, ["a"]), timeout_s=5)
    document = await service.answer(model, Ask(Output.EMBED, ["a"], PromptChoice(input_type="passage")), timeout_s=5)
    assert service.backend.client.calls == [("m", "2", "embedding"), ("m", "1", "embedding"), ("m", "1", "embedding")]
    assert query.vectors[:, 0].tolist() == [2.0, 2.0] and default.vectors[0, 0] == document.vectors[0, 0] == 1.0
    # The query route's prompt ("q: ") is in its texts: their first token is "q".
    assert query.vectors[0, 1] == model.routes[1].tokenizer.encode(["q"]).input_ids[0, 1]


async def test_a_static_route_is_computed_in_the_gateway(service, tokenizer_file):
    model = routed(tokenizer_file)
    route = model.routes[2]
    result = await service.dispatch.outputs(model, route, route.step, ["this test, this"], "", 5)
    assert service.backend.client.calls == []
    (row,) = result.vectors
    assert np.flatnonzero(row).tolist() == [2023, 3231] and row[[2023, 3231]].tolist() == [1.5, 2.5]
    assert result.token_counts == [4]  # no [CLS] nor [SEP]


async def test_a_batch_jobs_requests_of_several_routes_answer_as_online(service, tokenizer_file):
    model = routed(tokenizer_file)
    asks = [
        Ask(Output.EMBED, ["x", "y"], PromptChoice(task="query")),
        Ask(Output.SPARSE, ["z"]),
        Ask(Output.EMBED, ["w"]),
    ]
    first, refused, last = await service.answer_bulk(model, asks)
    assert isinstance(refused, WrongModelKind)
    assert first.vectors[:, 0].tolist() == [2.0, 2.0] and last.vectors[:, 0].tolist() == [1.0]
    assert sorted(service.backend.client.calls) == [("m", "1", "embedding"), ("m", "2", "embedding")]


def colbert(tokenizer_file: Path, tmp_path: Path) -> ServedModel:
    expansion = QueryExpansion(strategy="fixed", attend=False, token_id=103, length=8)
    info = MultiVectorInfo(
        similarity="maxsim",
        query=MultiVectorTask(max_length=8, expansion=expansion),
        document=MultiVectorTask(max_length=16, skiplist=[1010, 1029]),  # "," and "?"
        default=MultiVectorTask(max_length=32, skiplist=[1010, 1029]),
    )
    metadata = fake_metadata(
        "org/colbert", kind="multi_vector_encoder", embedding_dim=2, normalized=True, record=info,
        prompts={"query": "", "document": ""},
    )
    # A published model's files: its tokenizer in tokenizer/.
    (tmp_path / "tokenizer").mkdir()
    (tmp_path / "tokenizer" / "tokenizer.json").write_bytes(tokenizer_file.read_bytes())
    routes = MultiVectorKind(metadata).routes(lambda name: tmp_path, "colbert")
    return ServedModel("org/colbert", "colbert", metadata, routes[0].tokenizer, routes=routes)


async def test_a_multi_vector_answer_keeps_each_tasks_tokens(service, tokenizer_file, tmp_path):
    model = colbert(tokenizer_file, tmp_path)
    ask = Ask(Output.MULTI_VECTOR, ["fox, jumps?", "a"], PromptChoice(task="document"), Options(normalize=False))
    (fox, a) = (await service.answer(model, ask, timeout_s=5)).vectors
    # [CLS] fox , jumps ? [SEP] without the skiplist's "," and "?": positions 0, 1, 3, 5.
    assert fox[:, 0].tolist() == [1.0, 2.0, 4.0, 6.0] and a.shape == (3, 2)
    query = Ask(Output.MULTI_VECTOR, ["fox, jumps?"], PromptChoice(task="query"), Options(normalize=False))
    (expanded,) = (await service.answer(model, query, timeout_s=5)).vectors
    # Every position of the expansion length, the [MASK]s (103) included.
    assert expanded[:, 0].tolist() == [float(n) for n in range(1, 9)] and expanded[-1, 1] == 104.0
    with pytest.raises(WrongModelKind, match="precision"):
        await service.answer(model, Ask(Output.MULTI_VECTOR, ["a"], options=Options(precision="int8")), timeout_s=5)


async def test_a_multi_vector_rerank_is_maxsim_of_the_query_against_each_document(service, tokenizer_file, tmp_path):
    from embedgate.api.compute.requests.late_interaction import maxsim

    model = colbert(tokenizer_file, tmp_path)
    ask = Ask(Output.RERANK, ["fox jumps", "a long document, about a fox"], query="fox")
    result = await service.answer(model, ask, timeout_s=5)
    vectors = {}
    for task, texts in (("query", ["fox"]), ("document", ask.inputs)):
        vectors[task] = (await service.answer(
            model, Ask(Output.MULTI_VECTOR, texts, PromptChoice(task=task), Options(normalize=False)), timeout_s=5
        )).vectors
    np.testing.assert_allclose(result.vectors[:, 0], maxsim(vectors["query"][0], vectors["document"]))
    assert result.vectors.shape == (2, 1)


async def test_a_task_the_model_has_no_route_for_is_refused(service, tokenizer_file):
    model = routed(tokenizer_file)
    model.routes = [model.routes[1]]  # its query route only
    with pytest.raises(UnknownRoute, match="its routes: 'query'"):
        await service.answer(model, Ask(Output.EMBED, ["a"]), timeout_s=5)
