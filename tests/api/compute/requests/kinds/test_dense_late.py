"""A dense model's late chunks: planned as a run of their own step (``LateChunks``) on the
model's late-chunking graph, and through EmbeddingService with a fake graph: rows sent in
slices, each chunk's vector from its own row, the usage the rows' tokens; a model without
the graph refused saying why, before anything runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from embedgate.api.compute.requests.asks import Ask, Options, Output
from embedgate.api.compute.requests.chunking import Chunking
from embedgate.api.compute.requests.kinds.dense import LateChunks
from embedgate.api.compute.service import EmbeddingService
from embedgate.api.errors import InvalidOption
from embedgate.api.models.registry import ServedModel
from embedgate.api.settings import Settings
from embedgate.contract.kinds.dense import DenseInfo, LateChunking
from embedgate.contract.metadata_parts import VariantInfo
from embedgate.contract.preprocess.text import TextTokenizer
from tests.api.conftest import fake_metadata

LATE = DenseInfo(late_chunking=LateChunking(parity=fake_metadata("m").parity))


def test_late_chunks_are_a_run_of_their_own_step_on_the_late_graph(minilm_path):
    tokenizer = TextTokenizer(Path(minilm_path) / "tokenizer.json", 32)
    model = ServedModel("m", "m", fake_metadata("m", max_seq_length=32, record=LATE), tokenizer)
    chunking = Chunking(6, 2, late=True)
    plan = model.kind.planned(model, Ask(Output.EMBED, ["a text"], chunking=chunking))
    (run,) = plan.runs
    assert run.route is model.routes[0] and run.inputs == ["a text"] and plan.chunking is None
    assert isinstance(run.step, LateChunks) and (run.step.part, run.step.chunking) == ("m---late", chunking)
    assert run.step.triton_part(run.route) == "m---late" and not run.step.joined and not run.step.cached


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
    model = ServedModel("m", "m", fake_metadata("m", max_seq_length=32, max_batch_size=2, record=LATE), tokenizer)
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


async def test_a_batch_jobs_line_of_late_chunks_answers_as_online_with_its_chunks(minilm_path):
    """In the bulk lane a line's late chunks are a call of its own: its answer is the online
    one, chunks and all, and a line the kind refuses is that line's error alone."""
    tokenizer = TextTokenizer(Path(minilm_path) / "tokenizer.json", 32)
    model = ServedModel("m", "m", fake_metadata("m", max_seq_length=32, max_batch_size=2, record=LATE), tokenizer)
    service = EmbeddingService(Settings(), LateGraph())
    texts = [" ".join(f"word{n}" for n in range(40))]
    late = Ask(Output.EMBED, texts, options=Options(normalize=False), chunking=Chunking(6, 2, late=True))
    too_wide = Ask(Output.EMBED, texts, chunking=Chunking(64, late=True))
    try:
        with service.admit(model):
            online = await service.answer(model, late, timeout_s=5)
        line, refused = await service.answer_bulk(model, [late, too_wide])
    finally:
        service.close()
    assert line.chunks == online.chunks and np.array_equal(line.vectors, online.vectors)
    assert isinstance(refused, InvalidOption)
