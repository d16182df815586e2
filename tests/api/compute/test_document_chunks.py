"""A chunked plan (api/compute/document_chunks.py): marked only for dense embeddings of texts
through a text tokenizer, refused otherwise naming the field; expanded into its chunks'
texts, each with the plan's prompt, the answer saying which chunks they are; and through
EmbeddingService (test_service.py's echoing Triton client), each chunk an input, the
overlap charged to the key; late chunks through a fake late-chunking graph."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from embedgate.api.compute.backend.triton import TritonBackend
from embedgate.api.compute.document_chunks import chunked_plan, expanded
from embedgate.api.compute.requests.asks import Ask, Options, Output, Plan, Run
from embedgate.api.compute.requests.chunking import Chunking
from embedgate.api.compute.requests.results import Embeddings
from embedgate.api.compute.requests.routes import EVERY_TASK, Route
from embedgate.api.compute.scheduling import tenants
from embedgate.api.compute.requests.costs import items_cost
from embedgate.api.compute.scheduling.rates import KeyRates
from embedgate.api.compute.scheduling.threads import OffLoopThreads
from embedgate.api.compute.service import EmbeddingService
from embedgate.api.errors import InvalidOption, RateLimited
from embedgate.api.models.registry import ServedModel
from embedgate.api.settings import Settings
from embedgate.contract.kinds.dense import DenseInfo, LateChunking
from embedgate.contract.metadata_parts import VariantInfo
from embedgate.contract.preprocess.prompted import PromptedText
from embedgate.contract.preprocess.text import TextTokenizer
from tests.api.conftest import FakeModel, fake_metadata

from .test_service import EchoClient, Meta

# What the plan reads of a model: its name, kind and max length.
MODEL = FakeModel("org/minilm", changes={"max_seq_length": 32})


@pytest.fixture(scope="module")
def tokenizer(minilm_path):
    return TextTokenizer(f"{minilm_path}/tokenizer.json", 32)


def test_only_dense_embeddings_of_texts_through_a_text_tokenizer_are_chunked(tokenizer):
    chunking = Chunking(8, 2)
    route = Route("", EVERY_TASK, tokenizer, "part")
    plan = Plan([Run(route, ["a text"], "query: ")])
    model = MODEL

    assert chunked_plan(model, Ask(Output.EMBED, ["a text"], chunking=chunking), plan).chunking == chunking
    assert chunked_plan(model, Ask(Output.EMBED, ["a text"]), plan).chunking is None
    with pytest.raises(InvalidOption, match="chunking is for dense embeddings of texts") as sparse:
        chunked_plan(model, Ask(Output.SPARSE, ["a text"], chunking=chunking), plan)
    assert sparse.value.param == "chunking"
    other = Plan([Run(Route("", EVERY_TASK, object(), "part"), ["a text"])])  # a CLIP tower's tokenizer, say
    with pytest.raises(InvalidOption, match="chunking"):
        chunked_plan(model, Ask(Output.EMBED, ["a text"], chunking=chunking), other)


def test_the_expanded_plan_runs_the_chunks_with_the_prompt_and_answers_which_they_are(tokenizer):
    route = Route("", EVERY_TASK, tokenizer, "part")
    texts = ["one two three four five six seven eight nine ten eleven twelve", "short"]
    plan = Plan([Run(route, texts, "query: ")], chunking=Chunking(6, 2))

    chunks_plan = asyncio.run(expanded(OffLoopThreads(1, "tokenize"), MODEL, plan, 100))

    (run,) = chunks_plan.runs
    assert run.prefix == "query: " and run.route is route
    assert run.inputs == [
        "one two three four five six", "five six seven eight nine ten", "nine ten eleven twelve", "short"
    ]
    answer = chunks_plan.finish([Embeddings(np.zeros((4, 3), dtype=np.float32), [1, 1, 1, 1], 0, 0.0, 0.0)])
    assert [[(c.start, c.end, c.tokens) for c in mine] for mine in answer.chunks] == [
        [(0, 27, 6), (19, 48, 6), (40, 62, 4)], [(0, 5, 1)]
    ]
    # The window is the model's: 32 tokens less [CLS], [SEP] and the prompt's 2.
    too_wide = Plan([Run(route, texts, "query: ")], chunking=Chunking(29))
    with pytest.raises(InvalidOption, match="holds at most 28 tokens"):
        asyncio.run(expanded(OffLoopThreads(1, "tokenize"), MODEL, too_wide, 100))


async def test_a_chunked_ask_runs_each_chunk_as_an_input_and_its_key_pays_for_the_overlap(minilm_path):
    """The chunks' texts go to Triton as inputs (each with [CLS] and [SEP]: the echo's token
    counts), the answer carries which chunks they are, and a key with a token limit is
    charged for the tokens the overlap repeats once the chunks are known."""
    settings = Settings()
    client = EchoClient()
    tokenizer = TextTokenizer(Path(minilm_path) / "tokenizer.json", 256)
    model = ServedModel("m", "m", Meta(), tokenizer)
    service = EmbeddingService(settings, TritonBackend(client))
    service.rates = KeyRates(0, 1000, lambda: 100.0)  # a clock that stands still: no refill
    text = " ".join(f"word{n}" if n % 5 == 0 else "word" for n in range(60))
    ask = Ask(Output.EMBED, [text], options=Options(normalize=False), chunking=Chunking(16, 8))
    try:
        tenants.serve_as(tenants.Tenant("a-hash", "a"))
        before = service.charge([text]).tokens.remaining
        with service.admit(model):
            result = await service.answer(model, ask, timeout_s=5)
        (chunks,) = result.chunks
        parts = [text[chunk.start : chunk.end] for chunk in chunks]
        assert len(parts) > 3 and result.vectors.shape[0] == len(parts)
        np.testing.assert_array_equal(result.vectors[:, 0], [chunk.tokens + 2 for chunk in chunks])
        assert all(chunk.tokens <= 16 for chunk in chunks)
        # The bucket paid for the chunks' texts, not only the text: the overlap's repeats too.
        remaining = service.rates.take(tenants.current(), 0).tokens.remaining
        assert remaining == pytest.approx(before - (items_cost(parts) - items_cost([text])), abs=1)  # whole tokens
        # A key without the tokens the overlap adds is refused once they are known.
        service.rates.take(tenants.current(), remaining - 1)
        with pytest.raises(RateLimited):
            with service.admit(model):
                await service.answer(model, ask, timeout_s=5)
    finally:
        tenants.serve_as(None)
        service.close()


class LateGraph:
    """A late-chunking graph that says what it pooled: per chunk, its tokens and the sum of their ids."""

    def __init__(self):
        self.calls: list[tuple[str, str, int]] = []

    async def infer(self, model, part, tensors, output, *, timeout_s, version=""):
        self.calls.append((part, output, len(tensors["input_ids"])))
        ids, started, ended = tensors["input_ids"], tensors["chunk_started"], tensors["chunk_ended"]
        out = np.zeros((len(ids), int(started.max()), 3), dtype=np.float32)
        for k in range(out.shape[1]):
            member = (k < started) & (k >= ended)
            out[:, k] = np.stack([member.sum(axis=1), (ids * member).sum(axis=1), np.ones(len(ids))], axis=1)
        return out


async def test_late_chunks_run_their_rows_through_the_late_graph_each_chunk_from_its_own(minilm_path):
    """Rows sent to the model's late-chunking graph in slices of max_batch_size, each chunk's
    vector taken from its row's output in the chunks' order (each pooled its own tokens), the
    usage the rows' tokens; a model without the graph refused saying why, before anything runs."""
    tokenizer = TextTokenizer(Path(minilm_path) / "tokenizer.json", 32)
    late = DenseInfo(late_chunking=LateChunking(parity=fake_metadata("m").parity))
    model = ServedModel("m", "m", fake_metadata("m", max_seq_length=32, max_batch_size=2, record=late), tokenizer)
    graph = LateGraph()
    service = EmbeddingService(Settings(), graph)
    texts = [" ".join(f"word{n}" for n in range(40)), "a short one"]
    ask = Ask(Output.EMBED, texts, options=Options(normalize=False), chunking=Chunking(6, 2, late=True))
    try:
        with service.admit(model):
            result = await service.answer(model, ask, timeout_s=5)
        assert {(part, output) for part, output, _ in graph.calls} == {("m---late", "chunk_embeddings")}
        assert sum(rows for _, _, rows in graph.calls) > 2 and all(rows <= 2 for _, _, rows in graph.calls)
        whole = tokenizer.whole()
        vectors = iter(result.vectors)
        for text, chunks in zip(texts, result.chunks):
            own = whole.encode(text, add_special_tokens=False)
            for chunk in chunks:
                inside = [i for i, (a, b) in enumerate(own.offsets) if chunk.start <= a and b <= chunk.end]
                assert next(vectors).tolist() == [chunk.tokens, sum(own.ids[i] for i in inside), 1] and len(inside) == chunk.tokens
        assert sum(result.token_counts) > sum(len(whole.encode(text).ids) for text in texts)  # windows overlap
        plain = ServedModel("p", "p", fake_metadata("p", max_seq_length=32), tokenizer)
        with pytest.raises(InvalidOption, match="converted without its late-chunking graph: .*EMBEDGATE_LATE_CHUNKING"):
            service.plan(plain, ask)
        int8 = ServedModel("v", "v", fake_metadata("v", max_seq_length=32, variant=VariantInfo(name="int8", onnx_bytes=1)),
                           tokenizer)
        with pytest.raises(InvalidOption, match="model 'v' is the '@int8' variant: late chunking runs the model's own"):
            service.plan(int8, ask)
        refused = DenseInfo(late_chunking_refusal="Its pooling is 'cls', not the mean of the tokens")
        cls = ServedModel("c", "c", fake_metadata("c", max_seq_length=32, record=refused), tokenizer)
        with pytest.raises(InvalidOption, match="model 'c' has no late chunking: its pooling is 'cls'"):
            service.plan(cls, ask)
    finally:
        service.close()


def test_a_prompt_kept_apart_stays_apart_in_each_chunk(tokenizer):
    """A model that pools a text without its prompt's tokens: each chunk keeps the prompt apart too."""
    route = Route("", EVERY_TASK, tokenizer, "part")
    texts = ["one two three four five six seven eight"]
    plan = Plan([Run(route, [PromptedText("query: ", texts[0])])], chunking=Chunking(4))
    (run,) = asyncio.run(expanded(OffLoopThreads(1, "tokenize"), MODEL, plan, 100)).runs
    assert run.inputs == [PromptedText("query: ", "one two three four"), PromptedText("query: ", "five six seven eight")]
