"""A chunked plan (api/compute/document_chunks.py): marked only for dense embeddings of texts
through a text tokenizer, refused otherwise naming the field; expanded into its chunks'
texts, each with the plan's prompt, the answer saying which chunks they are."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np
import pytest

from embedgate.api.compute.document_chunks import chunked_plan, expanded
from embedgate.api.compute.requests.asks import Ask, Output, Plan, Run
from embedgate.api.compute.requests.chunking import Chunking
from embedgate.api.compute.requests.kinds import kind_of
from embedgate.api.compute.requests.results import Embeddings
from embedgate.api.compute.requests.routes import EVERY_TASK, Route
from embedgate.api.compute.scheduling.threads import OffLoopThreads
from embedgate.api.errors import InvalidOption
from embedgate.contract.preprocess.text import TextTokenizer
from tests.api.conftest import fake_metadata


@dataclass
class Model:
    tokenizer: object
    name: str = "org/minilm"
    changes: dict = field(default_factory=dict)

    @property
    def metadata(self):
        return fake_metadata(self.name, max_seq_length=32, **self.changes)

    @property
    def kind(self):
        return kind_of(self.metadata)


@pytest.fixture(scope="module")
def tokenizer(minilm_path):
    return TextTokenizer(f"{minilm_path}/tokenizer.json", 32)


def test_only_dense_embeddings_of_texts_through_a_text_tokenizer_are_chunked(tokenizer):
    chunking = Chunking(8, 2)
    route = Route("", EVERY_TASK, tokenizer, "part")
    plan = Plan([Run(route, ["a text"], "query: ")])
    model = Model(tokenizer)

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

    chunks_plan = asyncio.run(expanded(OffLoopThreads(1, "tokenize"), Model(tokenizer), plan, 100))

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
        asyncio.run(expanded(OffLoopThreads(1, "tokenize"), Model(tokenizer), too_wide, 100))
