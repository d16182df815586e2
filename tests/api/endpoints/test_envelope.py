"""The envelope every endpoint runs in, with the real embedding service over a fake Triton
client: one admission slot per request whatever its parts, a request over the model's
in-flight limit refused at once, refusals before the key is charged, a batch job's lines
answered as the route answers them, and a model not loaded loaded first where loads on a
first request are on (named in a body, a URL or a batch job's lines)."""

from __future__ import annotations

import asyncio
import collections
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from embedgate.api.compute.backend.triton import TritonBackend
from embedgate.api.compute.requests.asks import Ask, Output
from embedgate.api.compute.requests.served import ServedModel
from embedgate.api.compute.service import EmbeddingService
from embedgate.api.endpoints import Endpoints
from embedgate.api.endpoints.embed import OpenAIEmbed
from embedgate.api.endpoints.envelope import Call, Endpoint, Parts, Unloaded
from embedgate.api.endpoints.schemas.openai import EmbeddingsRequest
from embedgate.api.endpoints.schemas.tei import TeiEmbedRequest
from embedgate.api.endpoints.timing import LOAD_HEADER
from embedgate.api.errors import MemoryBudgetExceeded, ModelNotFound, ModelNotLoaded, Overloaded, PromptError
from embedgate.api.models.first_request import FirstRequestLoads
from embedgate.api.settings import Settings
from embedgate.contract.preprocess.text import TextTokenizer
from tests.api.conftest import fake_metadata
from tests.helpers import eventually


class HeldClient:
    """Answers each row with [its token count, its first token id], once released."""

    def __init__(self):
        self.calls = 0
        self.release = asyncio.Event()
        self.release.set()

    async def infer(self, triton_name, tensors, output, *, timeout_s, version=""):
        self.calls += 1
        await self.release.wait()
        ids, mask = tensors["input_ids"], tensors["attention_mask"]
        return np.stack([mask.sum(1), ids[:, 1]], axis=1).astype(np.float32)


class Registry:
    def __init__(self, model: ServedModel):
        self.model = model

    def served(self, name, pretrained=None):
        if name != self.model.name:
            raise ModelNotFound(f"model '{name}' is not in the repository; load it first")
        return self.model


@pytest.fixture
def parts(minilm_path):
    settings = Settings(max_inflight_requests=1, response_cache_mb=0, key_requests_per_minute=0)
    client = HeldClient()
    service = EmbeddingService(settings, TritonBackend(client))
    metadata = fake_metadata("org/m", embedding_dim=2, max_batch_size=8, prompts={"query": "query: "})
    model = ServedModel("org/m", "org--m", metadata, TextTokenizer(Path(minilm_path) / "tokenizer.json", 32))
    yield Parts(Registry(model), service, settings), model, client
    service.close()


class TwoAsks(Endpoint[EmbeddingsRequest]):
    """A request of two parts (as /infer's texts and images)."""

    def check(self, body, model):
        model = self.model(body.model)
        return Call(model, (Ask(Output.EMBED, body.input[:1]), Ask(Output.EMBED, body.input[1:])), body.input)

    def respond(self, call, results):
        return [result.vectors for result in results]


async def test_a_request_takes_one_slot_for_all_its_parts_and_another_is_refused_at_once(parts):
    parts, model, client = parts
    client.release.clear()
    body = EmbeddingsRequest(model="org/m", input=["one text", "another"])
    request = asyncio.create_task(TwoAsks(parts)(body, 5.0))
    # Both parts reach the model side by side, holding one slot of a limit of one.
    await eventually(lambda: client.calls == 2, what="both parts' calls")
    assert model.inflight == 1
    with pytest.raises(Overloaded):
        await Endpoints(parts.registry, parts.service, parts.settings).embeddings(
            EmbeddingsRequest(model="org/m", input=["a third"]), 5.0
        )
    client.release.set()
    answer = await request
    assert len(answer.body) == 2 and model.inflight == 0


async def test_what_the_model_refuses_is_refused_before_the_key_is_charged(parts):
    parts, model, _ = parts
    charged = []
    parts.service.charge = lambda texts=(), images=0: charged.append(list(texts))
    endpoints = Endpoints(parts.registry, parts.service, parts.settings)
    with pytest.raises(PromptError):
        await endpoints.embeddings(EmbeddingsRequest(model="org/m", input=["a"], input_type="document"), 5.0)
    assert charged == [] and model.inflight == 0
    answer = await endpoints.embeddings(EmbeddingsRequest(model="org/m", input=["a"], input_type="query"), 5.0)
    assert charged == [["a"]] and answer.tokens == answer.body["usage"]["total_tokens"] > 0


async def test_a_batch_jobs_lines_answer_as_the_route_and_a_bad_line_as_its_error(parts):
    parts, model, _ = parts
    endpoints = Endpoints(parts.registry, parts.service, parts.settings)
    good = {"model": "org/m", "input": ["a line's text"]}
    lines = [good, {"model": "org/m", "input": []}, {"model": "org/m", "input": "x", "dimensions": 9},
             {"model": "org/m", "input": 7}, {"model": "org/m", "input": "x", "input_type": "document"}]
    outcomes = await endpoints.batch["/v1/embeddings"].answer_lines(lines)
    online = await endpoints.embeddings(EmbeddingsRequest.model_validate(good), 5.0)
    assert outcomes[0].status_code == 200 and outcomes[0].tokens == online.tokens
    assert [row["embedding"] for row in outcomes[0].body["data"]] == [
        pytest.approx(list(row["embedding"])) for row in online.body["data"]
    ]
    assert [(o.status_code, o.body["error"]["code"], o.body["error"]["param"]) for o in outcomes[1:]] == [
        (400, "bad_request", "input"),
        (400, "bad_request", "dimensions"),
        (400, "invalid_request", "input"),
        (400, "unknown_prompt", "input_type"),
    ]
    # A line is never admitted: the bulk lane is behind every online request.
    assert model.inflight == 0


class NotYetLoaded(Registry):
    """The model is in the repository; it is served once something loaded it."""

    def __init__(self, model: ServedModel):
        super().__init__(model)
        self.is_loaded = False

    def served(self, name, pretrained=None):
        if not self.is_loaded:
            raise ModelNotLoaded(f"model '{name}' is in the repository but not loaded", key=name)
        return super().served(name, pretrained)


class Loader:
    def __init__(self, registry: NotYetLoaded):
        self.registry = registry
        self.loads: list[str] = []

    async def load_sentence_transformer(self, name, model_path=None, **options):
        self.loads.append(name)
        await asyncio.sleep(0.01)
        self.registry.is_loaded = True
        return SimpleNamespace(model=name)


async def test_a_request_for_a_model_not_loaded_loads_it_when_first_requests_load(parts):
    parts, model, _ = parts
    registry = NotYetLoaded(model)
    loader = Loader(registry)
    residency = SimpleNamespace(waiting=collections.Counter())
    first = FirstRequestLoads(lambda: loader, residency)
    settings = parts.settings.model_copy(update={"max_inflight_requests": 4})
    service = EmbeddingService(settings, TritonBackend(HeldClient()))
    try:
        endpoint = OpenAIEmbed(Parts(registry, service, settings, first))
        body = EmbeddingsRequest(model="org/m", input=["one text"])
        answers = await asyncio.gather(endpoint(body, 5.0), endpoint(body, 5.0))
        assert loader.loads == ["org/m"]
        assert all(float(answer.headers[LOAD_HEADER]) > 0 for answer in answers)
        assert LOAD_HEADER not in (await endpoint(body, 5.0)).headers
    finally:
        service.close()


async def test_without_first_request_loads_a_model_not_loaded_is_refused(parts):
    parts, model, _ = parts
    endpoint = OpenAIEmbed(Parts(NotYetLoaded(model), parts.service, parts.settings))
    with pytest.raises(ModelNotLoaded):
        await endpoint(EmbeddingsRequest(model="org/m", input=["one text"]), 5.0)


class RefusingLoader(Loader):
    async def load_sentence_transformer(self, name, model_path=None, **options):
        self.loads.append(name)
        raise MemoryBudgetExceeded("loading it would pass EMBEDGATE_MEMORY_BUDGET_MB: nothing idle to unload")


def first_request_parts(parts, loader_type=Loader):
    """Parts whose registry holds the model unloaded, and a loader for first requests."""
    parts, model, _ = parts
    registry = NotYetLoaded(model)
    loader = loader_type(registry)
    first = FirstRequestLoads(lambda: loader, SimpleNamespace(waiting=collections.Counter()))
    return Parts(registry, parts.service, parts.settings, first), loader


async def test_a_batch_jobs_lines_load_their_model_once_when_first_requests_load(parts):
    loading, loader = first_request_parts(parts)
    lines = [{"model": "org/m", "input": [f"line {i}"]} for i in range(3)]
    outcomes = await Endpoints(loading.registry, loading.service, loading.settings, loading.first_requests).batch[
        "/v1/embeddings"].answer_lines(lines)
    assert [outcome.status_code for outcome in outcomes] == [200, 200, 200]
    assert loader.loads == ["org/m"]


async def test_a_batch_jobs_lines_say_why_their_models_load_was_refused(parts):
    loading, loader = first_request_parts(parts, RefusingLoader)
    lines = [{"model": "org/m", "input": ["a"]}, {"model": "org/m", "input": []}]
    outcomes = await Endpoints(loading.registry, loading.service, loading.settings, loading.first_requests).batch[
        "/v1/embeddings"].answer_lines(lines)
    assert [(o.status_code, o.body["error"]["code"]) for o in outcomes] == [
        (507, "memory_budget_exceeded"), (400, "bad_request")
    ]
    assert loader.loads == ["org/m"]


async def test_without_first_request_loads_a_batch_jobs_lines_are_refused(parts):
    _, model, _ = parts
    endpoints = Endpoints(NotYetLoaded(model), parts[0].service, parts[0].settings)
    (outcome,) = await endpoints.batch["/v1/embeddings"].answer_lines([{"model": "org/m", "input": ["a"]}])
    assert (outcome.status_code, outcome.body["error"]["code"]) == (409, "model_not_loaded")


async def test_a_model_a_url_names_is_loaded_by_whatever_answers_for_it(parts):
    """TEI's base URLs name their model: not loaded, it is an ``Unloaded`` that the route's
    endpoint, or the base URL's own answer, loads first."""
    loading, loader = first_request_parts(parts)
    tei = Endpoints(loading.registry, loading.service, loading.settings, loading.first_requests).tei
    named = tei.model_named("org/m")
    assert isinstance(named, Unloaded) and named.key == "org/m"
    answer = await tei.embed(TeiEmbedRequest(inputs=["a text"]), 5.0, named)
    assert loader.loads == ["org/m"] and float(answer.headers[LOAD_HEADER]) > 0
    assert tei.model_named("org/m") is loading.registry.model

    loading.registry.is_loaded = False
    seen = []

    async def kind_first(model, timeout_s):
        seen.append((model, timeout_s))
        return SimpleNamespace(headers={})

    answered = await tei.for_model(tei.model_named("org/m"), 5.0, kind_first)
    assert seen[0][0] is loading.registry.model and 0 < seen[0][1] <= 5.0
    assert LOAD_HEADER in answered.headers


async def test_without_first_request_loads_a_url_naming_a_model_not_loaded_is_refused(parts):
    _, model, _ = parts
    tei = Endpoints(NotYetLoaded(model), parts[0].service, parts[0].settings).tei
    with pytest.raises(ModelNotLoaded):
        tei.model_named("org/m")
