"""The envelope every endpoint runs in, with the real embedding service over a fake Triton
client: one admission slot per request whatever its parts, a request over the model's
in-flight limit refused at once, refusals before the key is charged, and a batch job's
lines answered as the route answers them."""

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
from embedgate.api.endpoints.envelope import Call, Endpoint, Parts
from embedgate.api.endpoints.schemas.openai import EmbeddingsRequest
from embedgate.api.endpoints.timing import LOAD_HEADER
from embedgate.api.errors import ModelNotFound, ModelNotLoaded, Overloaded, PromptError
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
