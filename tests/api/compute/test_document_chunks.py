"""A chunked plan (api/compute/document_chunks.py) expanded into its chunks' texts, each
with the plan's prompt, the answer saying which chunks they are, the overlap's tokens
charged; and through EmbeddingService (test_service.py's echoing Triton client), each
chunk an input, the overlap charged to the key."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from embedgate.api.compute.backend.triton import TritonBackend
from embedgate.api.compute.document_chunks import expanded
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
from embedgate.contract.preprocess.prompted import PromptedText
from embedgate.contract.preprocess.text import TextTokenizer
from tests.api.conftest import FakeModel

from .test_service import EchoClient, Meta

# What the plan reads of a model: its name, kind and max length.
MODEL = FakeModel("org/minilm", changes={"max_seq_length": 32})


@pytest.fixture(scope="module")
def tokenizer(minilm_path):
    return TextTokenizer(f"{minilm_path}/tokenizer.json", 32)


class Engine:
    """What the expansion asks of the compute side: the pool, the chunks' limit, the charge."""

    max_chunks = 100

    def __init__(self):
        self.in_pool = OffLoopThreads(1, "tokenize").run
        self.charged: list[float] = []

    def charge_more(self, tokens):
        self.charged.append(tokens)


def test_the_expanded_plan_runs_the_chunks_with_the_prompt_and_answers_which_they_are(tokenizer):
    route = Route("", EVERY_TASK, tokenizer, "part")
    texts = ["one two three four five six seven eight nine ten eleven twelve", "short"]
    plan = Plan([Run(route, texts, "query: ")], chunking=Chunking(6, 2))

    engine = Engine()
    chunks_plan = asyncio.run(expanded(engine, MODEL, plan))

    (run,) = chunks_plan.runs
    assert run.prefix == "query: " and run.route is route
    assert run.inputs == [
        "one two three four five six", "five six seven eight nine ten", "nine ten eleven twelve", "short"
    ]
    assert engine.charged == [pytest.approx(items_cost(run.inputs) - items_cost(texts))]
    answer = chunks_plan.finish([Embeddings(np.zeros((4, 3), dtype=np.float32), [1, 1, 1, 1], 0, 0.0, 0.0)])
    assert [[(c.start, c.end, c.tokens) for c in mine] for mine in answer.chunks] == [
        [(0, 27, 6), (19, 48, 6), (40, 62, 4)], [(0, 5, 1)]
    ]
    # The window is the model's: 32 tokens less [CLS], [SEP] and the prompt's 2.
    too_wide = Plan([Run(route, texts, "query: ")], chunking=Chunking(29))
    with pytest.raises(InvalidOption, match="holds at most 28 tokens"):
        asyncio.run(expanded(Engine(), MODEL, too_wide))


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


def test_a_prompt_kept_apart_stays_apart_in_each_chunk(tokenizer):
    """A model that pools a text without its prompt's tokens: each chunk keeps the prompt apart too."""
    route = Route("", EVERY_TASK, tokenizer, "part")
    texts = ["one two three four five six seven eight"]
    plan = Plan([Run(route, [PromptedText("query: ", texts[0])])], chunking=Chunking(4))
    (run,) = asyncio.run(expanded(Engine(), MODEL, plan)).runs
    assert run.inputs == [PromptedText("query: ", "one two three four"), PromptedText("query: ", "five six seven eight")]
