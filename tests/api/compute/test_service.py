"""EmbeddingService with a fake Triton client behind the Triton backend: chunking, order,
normalization, resending, merging and spreading, admission by cost."""

import asyncio
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from embedgate.api.compute.backend.triton import TritonBackend
from embedgate.api.compute.requests.asks import Ask, Options, Output
from embedgate.api.compute.requests.prompts import DEFAULT, PromptChoice
from embedgate.api.compute.service import EmbeddingService
from embedgate.api.errors import DeadlineExceeded, Overloaded, PromptError, TritonConnectionLost
from embedgate.api.models.registry import ServedModel
from embedgate.api.settings import Settings
from embedgate.contract.preprocess.text import TextTokenizer
from tests.helpers import eventually


async def embed(service, model, texts, *, normalize, timeout_s, prompt=DEFAULT, precision="float32"):
    """``texts``' dense embeddings, as ``SentenceTransformer.encode`` gives them, asked as an
    endpoint asks (``endpoints/envelope.py``): one slot of the model's in-flight limit."""
    ask = Ask(Output.EMBED, list(texts), prompt, Options(normalize=normalize, precision=precision))
    with service.admit(model):
        return await service.answer(model, ask, timeout_s=timeout_s)


class EchoClient:
    """Returns, for each row, [number of real tokens, first token id after CLS]."""

    def __init__(self):
        self.shapes = []

    async def infer(self, triton_name, tensors, output, *, timeout_s, version=""):
        input_ids, attention_mask = tensors["input_ids"], tensors["attention_mask"]
        self.shapes.append(input_ids.shape)
        return np.stack([attention_mask.sum(1), input_ids[:, 1]], axis=1).astype(np.float32)


@dataclass
class Meta:
    kind: str = "sentence_transformer"
    max_batch_size: int = 4
    normalized: bool = False
    form: str = "python"
    clip: None = None  # a sentence-transformer
    dynamic_batching: bool = True
    instance_count: int = 1
    prompts: dict | None = None
    default_prompt_name: str | None = None
    prompts_refused: str | None = None
    calibration: None = None
    gpu: None = None  # CPU instances
    routes: None = None
    graph_inputs: None = None  # converted before graph inputs were recorded
    gateway_only: bool = False  # a model in Triton
    max_seq_length: int = 256  # a chunked request's window (test_document_chunks.py)

    def record_of(self, record_class):
        return None  # a sentence-transformer that pools every token, or a model with no record


@pytest.fixture
def service(minilm_path):
    settings = Settings(max_inflight_requests=1)
    client = EchoClient()
    tokenizer = TextTokenizer(Path(minilm_path) / "tokenizer.json", 256)
    model = ServedModel("m", "m", Meta(), tokenizer)
    service = EmbeddingService(settings, TritonBackend(client))
    yield service, model, client, tokenizer
    service.close()


async def test_large_requests_are_chunked_by_length_and_returned_in_order(service):
    service, model, client, tokenizer = service
    texts = ["word " * n + f"w{n}" for n in (9, 1, 7, 3, 0, 5, 2, 8, 4, 6)]
    result = await embed(service, model, texts, normalize=False, timeout_s=5)
    expected = tokenizer.encode(texts)
    np.testing.assert_array_equal(result.vectors[:, 0], expected.attention_mask.sum(1))
    np.testing.assert_array_equal(result.vectors[:, 1], expected.input_ids[:, 1])
    assert len(client.shapes) == 3 and all(rows <= 4 for rows, _ in client.shapes)
    # Sorted by length, so the first chunk is narrower than the whole request.
    assert client.shapes[0][1] < expected.input_ids.shape[1]


async def test_native_backend_form_pads_to_buckets(service):
    service, model, client, _ = service
    model.metadata.form = "onnxruntime"
    await embed(service, model, ["a b c"], normalize=False, timeout_s=5)
    assert client.shapes == [(1, 8)]


async def test_normalize_gives_unit_vectors_unless_the_graph_already_did(service):
    service, model, _, _ = service
    result = await embed(service, model, ["a", "b c"], normalize=True, timeout_s=5)
    np.testing.assert_allclose(np.linalg.norm(result.vectors, axis=1), 1.0, rtol=1e-6)
    model.metadata.normalized = True
    result = await embed(service, model, ["a", "b c"], normalize=True, timeout_s=5)
    assert np.linalg.norm(result.vectors, axis=1).max() > 1.0


@pytest.mark.parametrize("count", [2, 10])  # merged with others, or a large request of its own
async def test_the_chosen_prompt_goes_before_every_text_and_its_tokens_count(service, count):
    service, model, _, tokenizer = service
    model.metadata.prompts = {"query": "query: ", "passage": "passage: "}
    model.metadata.default_prompt_name = "query"
    texts = [f"text number {i}" for i in range(count)]
    for choice, prompt in ((PromptChoice(prompt_name="passage"), "passage: "), (PromptChoice(), "query: ")):
        result = await embed(service, model, texts, normalize=False, timeout_s=5, prompt=choice)
        expected = tokenizer.encode([prompt + text for text in texts])
        assert result.token_counts == expected.token_counts
        np.testing.assert_array_equal(result.vectors[:, 1], expected.input_ids[:, 1])
    with pytest.raises(PromptError, match="its prompts: 'query', 'passage'"):
        await embed(service, model, texts, normalize=False, timeout_s=5, prompt=PromptChoice(prompt_name="x"))


async def test_requests_beyond_the_inflight_limit_are_rejected_at_once(service):
    service, model, _, _ = service
    model.inflight = 1
    with pytest.raises(Overloaded):
        await embed(service, model, ["a"], normalize=True, timeout_s=5)
    model.inflight = 0
    await embed(service, model, ["a"], normalize=True, timeout_s=5)
    assert model.inflight == 0


class DiesOnceClient(EchoClient):
    """Loses its connection on the first ``deaths`` calls, as when tritonserver is killed
    (and dies again while it restarts)."""

    def __init__(self, deaths: int = 1):
        super().__init__()
        self.calls = 0
        self.deaths = deaths

    async def infer(self, triton_name, tensors, output, *, timeout_s, version=""):
        self.calls += 1
        if self.calls <= self.deaths:
            raise TritonConnectionLost("the inference server is unavailable; retry shortly")
        return await super().infer(triton_name, tensors, output, timeout_s=timeout_s)


class FakeSupervisor:
    def __init__(self, comes_back: bool):
        self.restarts = 0
        self.comes_back = comes_back
        self.serving = True

    async def wait_restarted(self, since):
        if self.comes_back:
            self.restarts = since + 1
        return self.comes_back

    async def wait_serving(self):
        return True


async def test_a_request_is_sent_again_after_each_restart_when_triton_dies_again_while_it_restarts(minilm_path):
    client = DiesOnceClient(deaths=3)
    supervisor = FakeSupervisor(comes_back=True)
    service = EmbeddingService(Settings(), TritonBackend(client, supervisor))
    model = ServedModel("m", "m", Meta(), TextTokenizer(Path(minilm_path) / "tokenizer.json", 256))
    try:
        result = await embed(service, model, ["a b"], normalize=False, timeout_s=5)
    finally:
        service.close()
    assert client.calls == 4 and supervisor.restarts == 3 and result.vectors.shape == (1, 2)


@pytest.mark.parametrize("comes_back", [True, False])
async def test_a_request_triton_died_under_is_sent_again_once_it_is_back(minilm_path, comes_back):
    settings = Settings()
    client = DiesOnceClient()
    service = EmbeddingService(settings, TritonBackend(client, FakeSupervisor(comes_back)))
    model = ServedModel("m", "m", Meta(), TextTokenizer(Path(minilm_path) / "tokenizer.json", 256))
    try:
        if comes_back:
            result = await embed(service, model, ["a b"], normalize=False, timeout_s=5)
            assert client.calls == 2 and result.vectors.shape == (1, 2)
        else:
            with pytest.raises(TritonConnectionLost):
                await embed(service, model, ["a b"], normalize=False, timeout_s=5)
            assert client.calls == 1
    finally:
        service.close()


class NeverBack(FakeSupervisor):
    """A Triton that died and is not back: its restart is waited for and never comes."""

    async def wait_restarted(self, since):
        await asyncio.Event().wait()


async def test_a_request_whose_triton_is_not_back_before_its_deadline_exceeds_it(minilm_path):
    # docs/limits.md: only if Triton is not back within the request's deadline does it get
    # 504 (DeadlineExceeded's status), rather than waiting on.
    client = DiesOnceClient()
    service = EmbeddingService(Settings(), TritonBackend(client, NeverBack(comes_back=True)))
    model = ServedModel("m", "m", Meta(), TextTokenizer(Path(minilm_path) / "tokenizer.json", 256))
    try:
        with pytest.raises(DeadlineExceeded):
            # Bounded here too: a request that waited on past its deadline fails the test.
            await asyncio.wait_for(embed(service, model, ["a b"], normalize=False, timeout_s=0.3), 30)
    finally:
        service.close()
    assert client.calls == 1


class HeldClient(EchoClient):
    """Holds every call until released, so requests pile up behind the calls in flight."""

    def __init__(self):
        super().__init__()
        self.release = asyncio.Event()

    async def infer(self, triton_name, tensors, output, *, timeout_s, version=""):
        result = await super().infer(triton_name, tensors, output, timeout_s=timeout_s)
        await self.release.wait()
        return result


@pytest.mark.parametrize("coalesce_max_texts", [0, 2])
async def test_small_requests_waiting_together_share_one_triton_call(minilm_path, coalesce_max_texts):
    settings = Settings(coalesce_max_texts=coalesce_max_texts, coalesce_in_flight=1)
    client = HeldClient()
    service = EmbeddingService(settings, TritonBackend(client))
    tokenizer = TextTokenizer(Path(minilm_path) / "tokenizer.json", 8)
    model = ServedModel("m", "m", Meta(max_batch_size=256), tokenizer)
    requests = [["first"], ["two words", "word " * 20], ["three little words"], ["a", "b", "c"]]
    try:
        first = asyncio.create_task(embed(service, model, requests[0], normalize=False, timeout_s=5))
        await eventually(lambda: client.shapes, what="the first call")
        rest = [
            asyncio.create_task(embed(service, model, texts, normalize=False, timeout_s=5))
            for texts in requests[1:]
        ]
        # Every request admitted, and every call that does not wait for the first one made:
        # the merged ones wait in the coalescer, the rest reached the client.
        calls_before_release = 2 if coalesce_max_texts else 4
        await eventually(lambda: model.inflight == 4 and len(client.shapes) == calls_before_release, what="the calls")
        client.release.set()
        results = [await first, *[await task for task in rest]]
    finally:
        service.close()
    if coalesce_max_texts:
        # The first went alone; the next two waited and went together; the last has
        # more texts than are merged and went alone.
        assert sorted(rows for rows, _ in client.shapes) == [1, 3, 3]
    else:
        assert sorted(rows for rows, _ in client.shapes) == [1, 1, 2, 3]
    for texts, result in zip(requests, results):
        expected = tokenizer.encode(texts)
        np.testing.assert_array_equal(result.vectors[:, 0], expected.attention_mask.sum(1))
        np.testing.assert_array_equal(result.vectors[:, 1], expected.input_ids[:, 1])
        assert result.token_counts == expected.token_counts
        assert result.truncated == expected.truncated
    assert [r.truncated for r in results] == [0, 1, 0, 0]
    assert model.inflight == 0


async def test_where_triton_does_not_batch_every_request_is_merged_with_a_call_per_instance_and_one_waiting(
    minilm_path,
):
    # The settings for models Triton batches do not apply: every request that fits in one
    # call is merged, and two instances get three calls in flight.
    settings = Settings(coalesce_max_texts=1, coalesce_in_flight=24)
    client = HeldClient()
    service = EmbeddingService(settings, TritonBackend(client))
    tokenizer = TextTokenizer(Path(minilm_path) / "tokenizer.json", 8)
    model = ServedModel("m", "m", Meta(max_batch_size=8, dynamic_batching=False, instance_count=2), tokenizer)
    requests = [["a"], ["b"], ["c"], ["d", "e"], ["f"], ["g"], ["h"]]
    try:
        tasks = [
            asyncio.create_task(embed(service, model, texts, normalize=False, timeout_s=5)) for texts in requests
        ]
        await eventually(lambda: model.inflight == len(requests) and len(client.shapes) >= 3, what="three calls")
        assert len(client.shapes) == 3  # the others wait in the gateway
        client.release.set()
        results = [await task for task in tasks]
    finally:
        service.close()
    # The two-text request, over coalesce_max_texts, was merged too: fewer calls than requests.
    assert sum(rows for rows, _ in client.shapes) == 8 and len(client.shapes) < len(requests)
    for texts, result in zip(requests, results):
        expected = tokenizer.encode(texts)
        np.testing.assert_array_equal(result.vectors[:, 1], expected.input_ids[:, 1])


async def test_a_large_request_reaching_idle_instances_is_spread_over_them_and_put_back_in_order(minilm_path):
    settings = Settings(spread_min_texts=4, coalesce_max_texts=1)
    client = HeldClient()
    service = EmbeddingService(settings, TritonBackend(client))
    tokenizer = TextTokenizer(Path(minilm_path) / "tokenizer.json", 16)
    model = ServedModel("m", "m", Meta(max_batch_size=64, dynamic_batching=False, instance_count=2), tokenizer)
    texts = [" ".join(["word"] * (n % 13 + 1)) + f" {n}" for n in range(20)] + ["word " * 40]
    try:
        request = asyncio.create_task(embed(service, model, texts, normalize=False, timeout_s=5))
        # Both parts reach Triton before either is answered: they run side by side.
        await eventually(lambda: len(client.shapes) == 2, what="two calls")
        client.release.set()
        result = await request
        # A request arriving while a call is in flight on one of two instances goes whole.
        client.release.clear()
        held = asyncio.create_task(embed(service, model, ["one"], normalize=False, timeout_s=5))
        await eventually(lambda: len(client.shapes) == 3, what="a call in flight")
        others = [text + " again" for text in texts]  # not answered from the response cache
        whole = asyncio.create_task(embed(service, model, others, normalize=False, timeout_s=5))
        await eventually(lambda: len(client.shapes) == 4, what="the second request's call")
        client.release.set()
        await held
        assert (await whole).vectors.shape[0] == len(texts)
    finally:
        service.close()
    (first, _), (second, _) = client.shapes[:2]
    assert first + second == len(texts) and min(first, second) >= 1
    assert client.shapes[3][0] == len(texts)
    # Sorted by length before the cut: the part with the longest text has the fewest rows.
    widths = [width for _, width in client.shapes[:2]]
    assert [rows for rows, _ in client.shapes[:2]][widths.index(max(widths))] < len(texts) / 2
    expected = tokenizer.encode(texts)
    np.testing.assert_array_equal(result.vectors[:, 0], expected.attention_mask.sum(1))
    np.testing.assert_array_equal(result.vectors[:, 1], expected.input_ids[:, 1])
    assert result.token_counts == expected.token_counts
    assert result.truncated == expected.truncated == 1 and result.truncated_rows == expected.truncated_rows
    assert model.inflight == 0


@pytest.mark.parametrize(
    "dynamic_batching, share, paced",
    [(False, 0.8, True), (True, 0.8, False), (False, 0.0, False)],
)
def test_requests_are_admitted_by_cost_where_the_coalescer_is_the_models_only_batcher(
    minilm_path, dynamic_batching, share, paced
):
    service = EmbeddingService(Settings(admission_deadline_share=share), TritonBackend(EchoClient()))
    tokenizer = TextTokenizer(Path(minilm_path) / "tokenizer.json", 16)
    model = ServedModel("m", "m", Meta(dynamic_batching=dynamic_batching, instance_count=2), tokenizer)
    try:
        route = model.routes[0]
        coalescer = service.dispatch._coalescer(model, route, route.step)
        assert (coalescer.admission is not None) == paced
        if paced:
            assert coalescer.admission.pace.instances == 2 and coalescer.admission.deadline_share == share
    finally:
        service.close()


class SlowClient(EchoClient):
    """Each call takes ``seconds``, however many run at once."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds

    async def infer(self, triton_name, tensors, output, *, timeout_s, version=""):
        await asyncio.sleep(self.seconds)
        return await super().infer(triton_name, tensors, output, timeout_s=timeout_s)


@pytest.mark.parametrize("share", [0.8, 0.0])
async def test_where_triton_batches_work_past_the_deadline_share_is_refused_at_once(minilm_path, share):
    """A model Triton batches is admitted by its backlog (``backlog.py``): once a request
    was answered, a burst past the share of its deadline is refused with Retry-After, and
    the requests admitted are answered."""
    service = EmbeddingService(Settings(admission_deadline_share=share), TritonBackend(SlowClient(0.4)))
    tokenizer = TextTokenizer(Path(minilm_path) / "tokenizer.json", 64)
    model = ServedModel("m", "m", Meta(max_batch_size=64, dynamic_batching=True), tokenizer)
    request = lambda n: [f"sentence {n} number {i} of a burst" for i in range(8)]  # noqa: E731
    try:
        await embed(service, model, request(-1), normalize=False, timeout_s=5)
        results = await asyncio.gather(
            *(embed(service, model, request(n), normalize=False, timeout_s=2) for n in range(20)),
            return_exceptions=True,
        )
    finally:
        service.close()
    answered = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, BaseException)]
    assert all(isinstance(r, Overloaded) and r.retry_after_s >= 1 for r in refused), refused
    if share:
        assert answered and refused
        assert results.index(refused[0]) == len(answered)  # in arrival order: the first ones fit
        assert "of work admitted with this request, past 80% of its 2s deadline" in refused[0].message
        backlog = service.backlogs[model.triton_names[0]]
        assert (backlog.requests, backlog.cost) == (0, 0)
    else:
        assert len(answered) == 20
    for n, result in enumerate(answered):
        np.testing.assert_array_equal(result.vectors[:, 1], tokenizer.encode(request(n)).input_ids[:, 1])

