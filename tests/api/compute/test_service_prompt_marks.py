"""Requests of different prompts to a model whose pooling leaves the prompt out, merged into
one Triton call by the coalescer: each row carries its own prompt's marks, so each text is
pooled as ``encode(prompt=...)`` pools it; and the response cache keeps a prompted text's row
apart from the same words sent without a prompt."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from embedgate.api.compute.backend.triton import TritonBackend
from embedgate.api.compute.requests.asks import Ask, Options, Output
from embedgate.api.compute.requests.prompts import PromptChoice
from embedgate.api.compute.requests.served import ServedModel
from embedgate.api.compute.service import EmbeddingService
from embedgate.api.settings import Settings
from embedgate.contract.kinds.dense import DenseInfo, PromptExclusion
from embedgate.contract.preprocess.prompted import PromptMarkingTokenizer
from embedgate.contract.spec import PROMPT_TOKEN, ParityResult
from tests.api.conftest import fake_metadata
from tests.helpers import eventually

PARITY = ParityResult(passed=True, threshold=0.9999, min_cosine=1.0, sentences=1)


class HeldClient:
    """Answers each row with [its marked tokens, its pooled tokens]; holds every call until
    released, so requests pile up behind the first."""

    def __init__(self):
        self.calls: list[np.ndarray] = []
        self.release = asyncio.Event()

    async def infer(self, triton_name, tensors, output, *, timeout_s, version=""):
        mask = tensors["attention_mask"]
        self.calls.append(mask)
        await self.release.wait()
        return np.stack([(mask == PROMPT_TOKEN).sum(1), (mask == 1).sum(1)], axis=1).astype(np.float32)


async def test_rows_of_different_prompts_share_a_call_each_with_its_own_marks(minilm, minilm_path):
    special_ids = sorted(minilm.tokenizer.all_special_ids)
    record = DenseInfo(prompt_exclusion=PromptExclusion(special_ids=special_ids, parity=PARITY))
    metadata = fake_metadata(
        "org/instructor", embedding_dim=2, max_seq_length=64, max_batch_size=64, prompts={"query": "query: "},
        default_prompt_name="query", record=record,
    )
    tokenizer = PromptMarkingTokenizer(Path(minilm_path) / "tokenizer.json", 64, special_ids=special_ids)
    model = ServedModel("org/instructor", "org--instructor", metadata, tokenizer)
    client = HeldClient()
    service = EmbeddingService(Settings(coalesce_in_flight=1, response_cache_mb=8), TritonBackend(client))

    async def embed(text: str, choice: PromptChoice):
        with service.admit(model):
            ask = Ask(Output.EMBED, [text], choice, Options(normalize=False))
            return (await service.answer(model, ask, timeout_s=5)).vectors[0].tolist()

    asked = [
        ("first alone", PromptChoice()),
        ("a man eats", PromptChoice()),  # the default prompt
        ("a man eats", PromptChoice(prompt="Represent the sentence for retrieval: ")),
        ("a man eats", PromptChoice(prompt="")),
        ("query: a man eats", PromptChoice(prompt="")),  # the prompt's words, as the text's own
    ]
    try:
        first = asyncio.create_task(embed(*asked[0]))
        await eventually(lambda: client.calls, what="the first call")
        rest = [asyncio.create_task(embed(*one)) for one in asked[1:]]
        await eventually(lambda: model.inflight == len(asked), what="every request waiting")
        client.release.set()
        answers = [await first, *[await task for task in rest]]
        # Asked again: each from its own row in the response cache, none from another's.
        again = [await embed(*one) for one in asked]
    finally:
        service.close()
    assert [len(mask) for mask in client.calls] == [1, 4], "the waiting requests went in one call"
    words = len(tokenizer.encode(["a man eats"]).input_ids[0]) - 2  # without [CLS] and [SEP]
    query, represent = tokenizer.prompt_tokens("query: "), tokenizer.prompt_tokens("Represent the sentence for retrieval: ")
    # Marked: [CLS] and the prompt's tokens; pooled: the text's and the [SEP].
    assert answers[1:] == [[query, words + 1], [represent, words + 1], [0, words + 2], [0, query + words + 1]]
    assert again == answers and len(client.calls) == 2
