"""The late-chunking graph of a sentence-transformer with mean pooling (Günther et al., "Late
Chunking", 2024): a text's tokens through the Transformer once, then each chunk's tokens
pooled as the model's Pooling pools (their mean), then the modules after it (Dense,
Normalize...), so every chunk's vector carries the context of the text around it.

Inputs: ``input_ids`` and ``attention_mask`` as the model's own graph takes them, and per
token ``chunk_started``/``chunk_ended`` (``contract/preprocess/late_chunks.py``: which chunks
the token is in); out, ``chunk_embeddings`` [rows, chunks, dim], zeros past a row's own
chunks. Published as a Triton model of its own (``<name>---late``), run by the same
``model.py`` as any text graph (its inputs ragged, its output per token).

Built only for a model whose second module is a Pooling of the tokens' mean and that has
no Router; checked against the library itself: ``encode(..., output_value=
"token_embeddings")`` of the parity sentences, the mean over spans of each (overlapping,
from one token to all of them), then the model's modules after its Pooling, every cosine
at the parity threshold, in one padded batch and each sentence alone. A graph that cannot
be exported or misses parity is not published: the model is served without it, and says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from embedgate.contract.errors import ParityError
from embedgate.contract.kinds.dense import LateChunking
from embedgate.contract.preprocess.late_chunks import chunk_marks
from embedgate.contract.spec import (
    ATTENTION_MASK,
    CHUNK_EMBEDDINGS,
    CHUNK_ENDED,
    CHUNK_STARTED,
    INPUT_IDS,
    ONNX_FILE,
    TOKEN_TYPE_IDS,
)
from embedgate.converters.library import module_stack, parity

LATE_INPUTS = (INPUT_IDS, ATTENTION_MASK, CHUNK_STARTED, CHUNK_ENDED)


def refusal(modules: Sequence, routed: bool) -> str | None:
    """Why a model of these modules has no late-chunking graph, or None where it may."""
    if routed:
        return "the model has a Router (modules by task); late chunking takes a model of one module stack"
    if len(modules) < 2 or type(modules[1]).__name__ != "Pooling":
        return "its second module is not a Pooling: it has no token vectors to pool"
    mode = modules[1].get_config_dict().get("pooling_mode")
    if mode not in ("mean", ["mean"], ("mean",)):
        return f"its pooling is {mode!r}, not the mean of the tokens: a chunk's tokens have no vector of their own"
    return None


def spans_of(length: int) -> list[tuple[int, int]]:
    """Chunks of a row of ``length`` tokens (its first and last special tokens left out, as
    the gateway leaves them) to check the graph on, in order: a token alone at each edge,
    and thirds that overlap by a token."""
    first, last = (1, length - 1) if length > 2 else (0, length)
    size = max(1, (last - first) // 3)
    spans = [(first, first + 1), (last - 1, last)]
    spans += [(start, min(last, start + size + 1)) for start in range(first, last, size)]
    return sorted(set(spans))


def _graph(modules, zero_token_types: bool):
    import torch

    transformer, after = modules[0], list(modules[2:])

    class LateGraph(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.transformer = transformer
            self.after = torch.nn.ModuleList(after)

        def forward(self, input_ids, attention_mask, chunk_started, chunk_ended):
            # The gateway sends no prompt marks here: every token of the row is attended to.
            mask = (attention_mask > 0).to(attention_mask.dtype)
            features = {INPUT_IDS: input_ids, ATTENTION_MASK: mask}
            if zero_token_types:
                features[TOKEN_TYPE_IDS] = torch.zeros_like(input_ids)
            tokens = self.transformer(features)["token_embeddings"]
            chunks = torch.arange(chunk_started.max(), device=input_ids.device).view(1, -1, 1)
            member = ((chunks < chunk_started.unsqueeze(1)) & (chunks >= chunk_ended.unsqueeze(1))).to(tokens.dtype)
            # The Pooling's mean: the sum over the chunk's tokens over their count (at least 1e-9).
            counts = member.sum(dim=2, keepdim=True)
            pooled = torch.bmm(member, tokens) / counts.clamp(min=1e-9)
            rows, count = pooled.shape[0], pooled.shape[1]
            features = {"sentence_embedding": pooled.reshape(rows * count, -1)}
            for module in self.after:
                features = module(features)
            vectors = features["sentence_embedding"].reshape(rows, count, -1).to(torch.float32)
            # A row's chunks past its own (a shorter row's in a batch) are zeros, not a bias.
            return vectors * (counts > 0).to(torch.float32)

    return LateGraph().eval()


def _feeds(token_ids: list[list[int]], spans: list[list[tuple[int, int]]]) -> dict[str, np.ndarray]:
    feeds = parity.pad(token_ids)
    width = feeds[INPUT_IDS].shape[1]
    marks = [chunk_marks(width, mine) for mine in spans]
    feeds[CHUNK_STARTED] = np.stack([started for started, _ in marks])
    feeds[CHUNK_ENDED] = np.stack([ended for _, ended in marks])
    return feeds


def reference(model, sentences: list[str]) -> tuple[list[list[tuple[int, int]]], list[np.ndarray]]:
    """Each sentence's check spans, and their vectors as the library makes them: its token
    embeddings, their mean over each span, then the modules after the Pooling."""
    import torch

    tokens = model.encode(sentences, output_value="token_embeddings", convert_to_numpy=False, prompt="")
    spans = [spans_of(len(vectors)) for vectors in tokens]
    vectors = []
    with torch.no_grad():
        for mine, these in zip(spans, tokens):
            pooled = torch.stack([these[start:end].float().mean(dim=0) for start, end in mine])
            features = {"sentence_embedding": pooled}
            for module in list(model)[2:]:
                features = module(features)
            vectors.append(features["sentence_embedding"].numpy())
    return spans, vectors


def build(
    model, zero_token_types: bool, example: dict, version_dir: Path, token_ids: list[list[int]],
    sentences: list[str], threshold: float,
) -> LateChunking:
    """The graph exported to ``version_dir`` and checked (``token_ids``: the gateway's
    tokenization of ``sentences``, checked to be the model's); raises ParityError or
    UnsupportedModelError (an export that fails) where it cannot serve."""
    spans, expected = reference(model, sentences)
    example_spans = [spans_of(int(mask.sum())) for mask in example[ATTENTION_MASK].numpy()]
    example_ids = [ids[: int(mask.sum())].tolist() for ids, mask in zip(example[INPUT_IDS].numpy(), example[ATTENTION_MASK].numpy())]
    traced = {name: _as_tensor(values) for name, values in _feeds(example_ids, example_spans).items()}
    onnx_file = version_dir / ONNX_FILE
    module_stack.export_graph(
        _graph(list(model), zero_token_types), traced, onnx_file, list(model),
        input_names=LATE_INPUTS, output_name=CHUNK_EMBEDDINGS, per_token=True,
    )
    run = parity.onnx_runner(onnx_file, CHUNK_EMBEDDINGS)
    batched = run(_feeds(token_ids, spans))
    checks = {"as one padded batch": [], "one sentence at a time": []}
    for row, (ids, mine, wanted) in enumerate(zip(token_ids, spans, expected)):
        alone = run(_feeds([ids], [mine]))[0]
        checks["as one padded batch"].append(parity.cosines(batched[row, : len(mine)], wanted))
        checks["one sentence at a time"].append(parity.cosines(alone[: len(mine)], wanted))
    joined = {name: np.concatenate(values) for name, values in checks.items()}
    result, worst = parity.summarize(joined, threshold, len(sentences))
    if not result.passed:
        raise ParityError(
            f"the late-chunking graph missed parity: min cosine {result.min_cosine:.6f} < {threshold} (chunk {worst})"
        )
    return LateChunking(parity=result)


def _as_tensor(values: np.ndarray):
    import torch

    return torch.from_numpy(values)
