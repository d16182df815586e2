"""A second graph for short texts: several texts share one row, each seeing only itself.

A dynamic batch of short sentences run through ``model.onnx`` pads every row to the
longest and pays onnxruntime's fixed cost per run (every weight streamed once) for every
sub-batch. ``model.packed.onnx`` takes the texts laid end to end in rows of a fixed width
instead, so one run computes almost no padding:

- ``input_ids`` [rows, width]: the texts' tokens, one after another, 0 after the last;
- ``position_ids`` [rows, width]: each text counts its positions from 0 (the graph adds
  the model's own first position, 2 for RoBERTa-family embeddings);
- ``segment_ids`` [rows, width]: 1, 2, ... for the texts of a row, 0 for padding; the
  attention mask is block-diagonal (a token attends to its own text only), built inside;
- ``token_index`` [texts, longest]: where each text's tokens lie in the flattened rows,
  ``rows * width`` past its end. Mean pooling gathers them, then the model's own modules
  after pooling (Dense, Normalize) run as in ``model.onnx``.

Built only where that is the same computation: a Transformer whose model takes
``position_ids``, mean pooling of every token (a prompt's too: not ``include_prompt=False``),
and nothing after it but Dense and Normalize. model.py
loads it instead of ``model.onnx``, so it is checked for parity against the PyTorch model
as ``model.onnx`` is (every parity sentence, one per row, in one padded batch and alone)
and also with the short ones packed; a graph that cannot be built or fails parity is left
out (the plain graph serves everything), never published.
"""

from __future__ import annotations

import errno
import inspect
import warnings
from pathlib import Path

import numpy as np

from embedgate.contract.spec import ATTENTION_MASK, EMBEDDING, INPUT_IDS, PACKED_ONNX_FILE, ParityResult
from embedgate.converters.library import parity

POSITION_IDS = "position_ids"
SEGMENT_IDS = "segment_ids"
TOKEN_INDEX = "token_index"
PACKED_INPUTS = (INPUT_IDS, POSITION_IDS, SEGMENT_IDS, TOKEN_INDEX)
_AFTER_POOLING = {"Dense", "Normalize"}
# Kinds of attention layer whose masks the packed graph builds (ModernBERT has both).
_LAYER_TYPES = {"full_attention", "sliding_attention"}


def unsupported_reason(model) -> str | None:
    """Why ``model`` cannot have a packed graph, or None when it can."""
    modules = list(model)
    if len(modules) < 2 or type(modules[1]).__name__ != "Pooling":
        return "the second module is not Pooling"
    if modules[1].get_config_dict().get("pooling_mode") != "mean":
        return "pooling is not the mean of the tokens"
    if getattr(modules[1], "include_prompt", True) is False:
        # model.py packs each text's tokens from its first; a prompt's are not to be pooled.
        return "pooling leaves a prompt's tokens out (include_prompt=False)"
    others = sorted({type(m).__name__ for m in modules[2:]} - _AFTER_POOLING)
    if others:
        return f"modules after pooling: {', '.join(others)}"
    auto_model = getattr(modules[0], "auto_model", None)
    if auto_model is None or POSITION_IDS not in inspect.signature(auto_model.forward).parameters:
        return "the transformer takes no position_ids"
    others = sorted(set(_layer_types(auto_model)) - _LAYER_TYPES)
    if others:
        return f"attention layers of kind {', '.join(others)}"
    return None


def _layer_types(auto_model) -> list[str]:
    """The kinds of attention layer a transformers model declares (none for most encoders)."""
    return list(getattr(getattr(auto_model, "config", None), "layer_types", None) or ())


def pack_in_order(lengths: list[int], width: int) -> list[list[int]]:
    """Texts (by index) laid into rows of ``width`` tokens in order, a new row when the
    next does not fit (the served model packs more tightly; any packing is the same
    computation)."""
    rows: list[list[int]] = []
    used = width
    for index, length in enumerate(lengths):
        if used + length > width:
            rows.append([])
            used = 0
        rows[-1].append(index)
        used += length
    return rows


def packed_inputs(token_ids: list[list[int]], rows: list[list[int]], width: int) -> dict[str, np.ndarray]:
    """The packed graph's inputs for ``token_ids`` laid out as ``rows``."""
    longest = max(len(ids) for ids in token_ids)
    input_ids = np.zeros((len(rows), width), dtype=np.int64)
    position_ids = np.zeros_like(input_ids)
    segment_ids = np.zeros_like(input_ids)
    token_index = np.full((len(token_ids), longest), len(rows) * width, dtype=np.int64)
    for row, texts in enumerate(rows):
        start = 0
        for segment, text in enumerate(texts, start=1):
            ids = token_ids[text]
            end = start + len(ids)
            input_ids[row, start:end] = ids
            position_ids[row, start:end] = np.arange(len(ids))
            segment_ids[row, start:end] = segment
            token_index[text, : len(ids)] = row * width + np.arange(start, end)
            start = end
    return {INPUT_IDS: input_ids, POSITION_IDS: position_ids, SEGMENT_IDS: segment_ids, TOKEN_INDEX: token_index}


def one_text_per_row(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The packed graph's inputs for a right-padded batch (``input_ids``, ``attention_mask``)
    left one text per row, as model.py runs a batch it does not pack (``_run_rows``)."""
    tokens = feeds[ATTENTION_MASK] > 0
    rows, width = tokens.shape
    cells = np.arange(rows * width, dtype=np.int64).reshape(rows, width)
    return {
        INPUT_IDS: feeds[INPUT_IDS],
        POSITION_IDS: np.where(tokens, np.arange(width, dtype=np.int64), 0),
        SEGMENT_IDS: tokens.astype(np.int64),
        TOKEN_INDEX: np.where(tokens, cells, rows * width),
    }


def position_offset(transformer) -> int:
    """The position the model gives a text's first token: padding_idx + 1 for RoBERTa-family
    embeddings (XLM-R, MPNet, ...), which count positions past their padding index, 0 for
    the others. (sentence-transformers infers it the same way when it packs texts for flash
    attention.)"""
    import torch

    for module in transformer.modules():
        padding_idx = getattr(module, "padding_idx", None)
        positions = getattr(module, "position_embeddings", None)
        if isinstance(padding_idx, int) and isinstance(positions, torch.nn.Embedding):
            return padding_idx + 1
    return 0


def _graph(model, needs_token_type_ids: bool):
    import torch

    transformer = model[0].auto_model
    after_pooling = torch.nn.ModuleList(list(model)[2:])
    # The graph's position_ids count from 0 (model.py builds them so); the model's own may not.
    first_position = position_offset(transformer)
    layer_types = sorted(set(_layer_types(transformer)))
    window = transformer.config.sliding_window if "sliding_attention" in layer_types else None
    if window is not None and getattr(transformer.config, "use_bidirectional_attention", False):
        # Gemma 3 with bidirectional attention (EmbeddingGemma) sees tokens closer than its
        # window (transformers' bidirectional overlay: distance < sliding_window); ModernBERT
        # those at most its window away.
        window -= 1

    class PackedGraph(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.transformer = transformer
            self.after_pooling = after_pooling

        def forward(self, input_ids, position_ids, segment_ids, token_index):
            # Block-diagonal: a token attends to the tokens of its own text, padding to none.
            same_text = (segment_ids[:, :, None] == segment_ids[:, None, :]) & (segment_ids[:, None, :] > 0)
            mask = _additive(same_text)
            if window is not None:
                # A 4D mask is used as given, also by sliding-window layers, which would then
                # see the whole text: such models take one mask per kind of layer instead, the
                # sliding one also limited to tokens at most ``window`` positions away.
                near = (position_ids[:, :, None] - position_ids[:, None, :]).abs() <= window
                sliding = _additive(same_text & near)
                mask = {kind: sliding if kind == "sliding_attention" else mask for kind in layer_types}
            arguments = {
                "input_ids": input_ids,
                "attention_mask": mask,
                "position_ids": position_ids + first_position,
            }
            if needs_token_type_ids:
                arguments["token_type_ids"] = torch.zeros_like(input_ids)
            tokens = self.transformer(**arguments).last_hidden_state
            flat = tokens.reshape(-1, tokens.shape[-1])
            # One zero row past the end: where token_index points for a text's padding.
            flat = torch.cat([flat, torch.zeros_like(flat[:1])])
            counts = (token_index < flat.shape[0] - 1).sum(dim=1, keepdim=True).to(flat.dtype)
            features = {"sentence_embedding": flat[token_index].sum(dim=1) / counts.clamp(min=1e-9)}
            for module in self.after_pooling:
                features = module(features)
            return features["sentence_embedding"].to(torch.float32)

    return PackedGraph().eval()


def _additive(allowed):
    """A [rows, 1, width, width] mask added to the attention scores: 0 where a token may
    attend, the float minimum where not, as transformers builds masks for eager attention.
    It passes a 4D mask on unchanged, and models that add the mask to their scores
    themselves (MPNet) would read a boolean one as +1 and +0, masking nothing; SDPA takes
    either."""
    import torch

    blocked = torch.tensor(torch.finfo(torch.float32).min)
    return torch.where(allowed, torch.tensor(0.0), blocked)[:, None, :, :]


def build(
    model,
    needs_token_type_ids: bool,
    version_dir: Path,
    token_ids: list[list[int]],
    reference: np.ndarray,
    threshold: float,
    width: int,
) -> tuple[ParityResult | None, str]:
    """Export and check ``<version_dir>/model.packed.onnx`` (``model``: a module stack):
    (its parity, what happened), or (None, why there is none)."""
    reason = unsupported_reason(model)
    if reason is not None:
        return None, f"no packed graph: {reason}"
    short = [i for i, ids in enumerate(token_ids) if len(ids) <= width // 2]
    if len(short) < 2:
        return None, "no packed graph: too few short parity sentences to check it with"
    texts = [token_ids[i] for i in short]
    rows = pack_in_order([len(ids) for ids in texts], width)
    inputs = packed_inputs(texts, rows, width)
    onnx_file = version_dir / PACKED_ONNX_FILE
    try:
        _export(_graph(model, needs_token_type_ids), inputs, onnx_file)
        run = parity.onnx_runner(onnx_file)
        # model.py loads this graph instead of model.onnx, also for batches it runs one text
        # per row (any text longer than the pack width): those must pass model.onnx's checks.
        checks = parity.embedding_checks(lambda feeds: run(one_text_per_row(feeds)), token_ids, reference)
        packed_check = f"{len(texts)} short sentences packed in {len(rows)} rows"
        checks[packed_check] = parity.cosines(run(inputs), reference[short])
        result, worst = parity.summarize(checks, threshold, len(token_ids))
    except Exception as error:  # noqa: BLE001 - the plain graph still serves; say why
        onnx_file.unlink(missing_ok=True)
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            raise  # a full disk fails the conversion (507), not only this graph
        return None, f"no packed graph: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    if not result.passed:
        onnx_file.unlink(missing_ok=True)
        return None, f"no packed graph: min cosine {result.min_cosine:.6f} < {threshold} ({worst})"
    return result, (
        f"packed graph: min cosine {result.min_cosine:.6f} on {len(token_ids)} sentences one per row "
        f"and {len(texts)} short ones in {len(rows)} rows"
    )


def _export(graph, inputs: dict[str, np.ndarray], onnx_file: Path) -> None:
    import onnx
    import torch

    from embedgate.converters.library.module_stack import OPSET

    dynamic = {0: "rows", 1: "width"}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            graph,
            tuple(torch.from_numpy(inputs[name]) for name in PACKED_INPUTS),
            str(onnx_file),
            input_names=list(PACKED_INPUTS),
            output_names=[EMBEDDING],
            dynamic_axes={
                INPUT_IDS: dynamic,
                POSITION_IDS: dynamic,
                SEGMENT_IDS: dynamic,
                TOKEN_INDEX: {0: "texts", 1: "longest"},
                EMBEDDING: {0: "texts"},
            },
            opset_version=OPSET,
            do_constant_folding=True,
            dynamo=False,
        )
    onnx.checker.check_model(str(onnx_file))
