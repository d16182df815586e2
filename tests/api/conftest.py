"""A gateway with fake parts, so the HTTP layer is tested without Triton."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import anyio
import numpy as np
import pytest
from fastapi.testclient import TestClient

from embedgate.api.compute.backend.triton import TritonBackend
from embedgate.api.compute.requests.asks import ASKED_AT, Output
from embedgate.api.compute.requests.results import Embeddings
from embedgate.api.compute.requests.routes import EVERY_TASK, Route
from embedgate.api.compute.requests.steps import ImageGraph
from embedgate.api.compute.scheduling.rates import KeyRates
from embedgate.api.compute.tokens import Token
from embedgate.api.endpoints import Endpoints
from embedgate.api.errors import ModelNotFound, ModelNotLoaded
from embedgate.api.gateway import Gateway
from embedgate.api.http.app import create_app
from embedgate.api.settings import Settings
from embedgate.contract.spec import ModelMetadata, ParityResult


def fake_metadata(name: str, **changes) -> ModelMetadata:
    fields = dict(
        model_name=name, triton_name=name.replace("/", "--"), source="fake", library="fake",
        library_version="0", embedding_dim=3, max_seq_length=16, normalized=False, form="python",
        max_batch_size=8, parity=ParityResult(passed=True, threshold=0.9999, min_cosine=1.0, sentences=1),
        created_at="2026-01-01T00:00:00+00:00", conversion_seconds=0.0,
    )
    return ModelMetadata(**{**fields, **changes})


@dataclass
class FakeModel:
    name: str
    triton_name: str = "fake"
    inflight: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    changes: dict = field(default_factory=dict)  # metadata fields other than fake_metadata's

    @property
    def metadata(self) -> ModelMetadata:
        # Its vectors already unit length (it ends in Normalize): the fake's come back as they are.
        return fake_metadata(self.name, **{"normalized": True, **self.changes})

    @property
    def kind(self):
        from embedgate.api.compute.requests.kinds import kind_of

        return kind_of(self.metadata)

    @property
    def routes(self):
        infos = self.metadata.routes
        if not infos:
            routes = [Route("", EVERY_TASK, None, self.triton_name)]
        else:
            routes = [Route(info.name, tuple(info.tasks), None, self.triton_name, str(info.version)) for info in infos]
        if Output.IMAGES in self.kind.gives():
            # A model that embeds images (a multimodal one) has a route that takes them.
            routes.append(Route("images", EVERY_TASK, None, self.triton_name, step=ImageGraph("fake")))
        return routes


class FakeResidency:
    """No budget, nothing measured: the registry's residency where no Triton runs."""

    budgets: dict = {}
    decides = True

    async def figures(self):
        return {}

    # The registry whose models it lists (set by it).
    owner: FakeRegistry | None = None

    async def listed_terms(self):
        """Each loaded model's terms: the server's (not pinned, kept for ever)."""
        return {model.name: (False, -1.0) for model in self.owner.loaded()}


@dataclass
class FakeRegistry:
    residency: FakeResidency = field(default_factory=FakeResidency)
    loaded_names: set = field(default_factory=lambda: {"org/loaded"})
    on_disk_names: set = field(default_factory=lambda: {"org/loaded", "org/on-disk"})
    # model name -> metadata fields its FakeModel has other than fake_metadata's
    changes: dict = field(default_factory=dict)

    def __post_init__(self):
        self.residency.owner = self

    def served(self, name, pretrained=None):
        from embedgate.api.models.names import to_triton_name

        to_triton_name(name)
        if name in self.loaded_names:
            return FakeModel(name, changes=self.changes.get(name, {}))
        if name in self.on_disk_names:
            raise ModelNotLoaded(f"model '{name}' is in the repository but not loaded")
        raise ModelNotFound(f"model '{name}' is not in the repository; load it first")

    def loaded(self):
        return [FakeModel(n, changes=self.changes.get(n, {})) for n in self.loaded_names]

    unloaded: list = field(default_factory=list)

    async def unload(self, name, pretrained=None):
        self.served(name)
        self.unloaded.append(name)


class FakeTokens:
    """Tokens as a fake tokenizer gives them: [CLS], then each word with its byte offsets."""

    def __init__(self):
        self.calls = []

    async def tokenize(self, model, texts, *, prompt, add_special_tokens):
        self.calls.append((model.name, texts, prompt.prompt_name, add_special_tokens))
        rows = []
        for text in texts:
            row = [Token(101, "[CLS]", True, None, None)] if add_special_tokens else []
            start = 0
            for word in text.split(" "):
                row.append(Token(len(word), word, False, start, start + len(word.encode())))
                start += len(word.encode()) + 1
            rows.append(row)
        return rows

    async def decode(self, model, ids, *, skip_special_tokens):
        self.calls.append((model.name, ids, skip_special_tokens))
        return [" ".join(str(i) for i in row if not (skip_special_tokens and i == 101)) for row in ids]


class FakeEmbeddings:
    def __init__(self):
        self.calls = []
        self.image_calls = []
        self.cache = None  # the response cache is off
        self.rates = KeyRates(0, 0)  # no per-key limits; a test sets its own
        self.tokens = FakeTokens()

    def charge(self, texts=(), images=0):
        return self.rates.charge(texts, images)

    def admit(self, model):
        return contextlib.nullcontext()

    def plan(self, model, ask, elsewhere=ASKED_AT):
        """The model's real kind plans the request (its checks, its prompt, its
        post-processing); images are the fake's own (:meth:`embed_images`)."""
        if ask.output is Output.IMAGES:
            return ask, None
        model.kind.require(ask.output, model.name, elsewhere)
        return ask, model.kind.plan(model, ask)

    async def run(self, model, planned, *, timeout_s):
        ask, plan = planned
        if plan is None:
            options = ask.options
            return await self.embed_images(
                model, ask.inputs, normalize=options.normalize, timeout_s=timeout_s, precision=options.precision
            )
        return await self.answer(model, ask, plan, timeout_s=timeout_s)

    async def embed_images(self, model, images, *, normalize, timeout_s, precision="float32"):
        self.image_calls.append((model.name, list(images), normalize))
        return Embeddings(np.ones((len(images), 3), dtype=np.float32), [0] * len(images), 0, 1.0, 2.0)

    async def answer(self, model, ask, plan, *, timeout_s):
        """The plan over fake runs; calls show each run's texts, prompts prepended, and normalize."""
        results = []
        for run in plan.runs:
            if run.step.takes_images:
                # Images among an ask's inputs (Cohere's): the fake's image vectors.
                results.append(await self.embed_images(model, run.inputs, normalize=ask.options.normalize, timeout_s=timeout_s))
                continue
            texts = [run.prefix + text if isinstance(text, str) else text for text in run.inputs]
            if ask.output is Output.RERANK and isinstance(texts[0], tuple):
                # A score per document: its length, so the best is the longest.
                self.calls.append((model.name, [texts[0][0], *(document for _, document in texts)], None))
                vectors = np.array([[len(document)] for _, document in texts], dtype=np.float32)
                counts = [len(query) + len(document) for query, document in texts]
            else:
                self.calls.append((model.name, list(texts), ask.options.normalize))
                vectors = np.arange(len(texts) * 3, dtype=np.float32).reshape(len(texts), 3)
                if ask.output is Output.MULTI_VECTOR:
                    # A vector per token: two tokens per text.
                    vectors = np.array([np.stack([row, row + 0.5]) for row in vectors] + [None], dtype=object)[:-1]
                counts = [len(t) if isinstance(t, str) else len(t[0]) + len(t[1]) for t in texts]
            # Stage times of their own (tokenize, inference, queue): the headers must carry each.
            results.append(Embeddings(vectors, counts, 0, 0.1, 0.2, queue_ms=0.3))
        return plan.finish(results)


class FakeClient:
    async def statistics(self):
        return [
            {
                "name": "org--loaded",
                "version": "1",
                "inference_count": 12,
                "execution_count": 3,
                "inference_stats": {"success": {"count": 3, "ns": 100}},
            }
        ]


class FakeGateway:
    # One process: its scrape is its own metrics (the real gateway's code, over these fakes).
    cluster = None
    own_metrics = Gateway.own_metrics
    metrics_text = Gateway.metrics_text
    gpu_memory = Gateway.gpu_memory

    def __init__(self, settings):
        self.settings = settings
        self.registry = FakeRegistry()
        self.models = self.registry  # one machine: loads go straight to the registry
        self.embeddings = FakeEmbeddings()
        self.endpoints = Endpoints(self.registry, self.embeddings, settings)
        self.client = FakeClient()
        self.restoring = False
        self.ready = True
        self.busy = False

    @property
    def backend(self):
        # The real Triton backend over these fakes: its statistics from the fake client, its
        # restarts and metrics from the Triton a test gives (``gateway.triton``).
        return TritonBackend(self.client, getattr(self, "triton", None))

    async def triton_ready(self):
        return self.ready

    def saturated(self):
        return self.busy


@pytest.fixture
def settings():
    return Settings(max_texts_per_request=4)


@pytest.fixture
def gateway(settings):
    return FakeGateway(settings)


@pytest.fixture
def client(settings, gateway):
    app = create_app(settings)
    app.state.gateway = gateway  # no lifespan: nothing real is started
    client = TestClient(app, raise_server_exceptions=False)
    # One event loop for all of the test's requests, as a server has: outside a `with`
    # (which would run the lifespan) TestClient starts a loop in a thread per request.
    with anyio.from_thread.start_blocking_portal(**client.async_backend) as portal:
        client.portal = portal
        yield client
