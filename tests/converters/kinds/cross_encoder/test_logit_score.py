"""A causal LM scored by its next token, as the graph computes it: the LM's head cut to the
scored tokens' rows (and put back after), the logits at each row's last real token, whichever
side the row was padded on, then LogitScore: predict's scores."""

from __future__ import annotations

import numpy as np
import pytest

from embedgate.converters.kinds.cross_encoder import logit_score
from embedgate.converters.library import parity
from tests import llm_rerankers

PAIRS = [("what is the fox", "the quick brown fox jumps"), ("hello", "a man is eating food at the bank"), ("a", "b")]


@pytest.fixture(scope="module")
def reranker(tmp_path_factory):
    from sentence_transformers import CrossEncoder

    directory = llm_rerankers.causal_reranker(tmp_path_factory.mktemp("logit-score") / "model", chat_template=None)
    return CrossEncoder(str(directory), device="cpu")


def padded(ids: list[list[int]], left: bool) -> dict[str, np.ndarray]:
    if not left:
        return parity.pad(ids)
    flipped = parity.pad([row[::-1] for row in ids])
    return {name: value[:, ::-1].copy() for name, value in flipped.items()}


@pytest.mark.parametrize("left", [False, True])
def test_the_graph_gives_predicts_logits_at_each_rows_last_real_token(reranker, left):
    import torch

    transformer, score = reranker[0], reranker[1]
    expected = reranker.predict([list(pair) for pair in PAIRS], activation_fn=torch.nn.Identity())
    assert np.ptp(expected) > 0.1
    features = [reranker.preprocess([list(pair)]) for pair in PAIRS]
    feeds = padded([f["input_ids"][0].tolist() for f in features], left)
    head = transformer.auto_model.get_output_embeddings()
    with logit_score.narrowed_head(transformer, score):
        assert transformer.auto_model.get_output_embeddings().out_features == 2
        graph = logit_score.graph(transformer, score, ("input_ids", "attention_mask"), "text")
        with torch.no_grad():
            got = graph(*(torch.from_numpy(feeds[name]) for name in ("input_ids", "attention_mask"))).numpy()
    assert transformer.auto_model.get_output_embeddings() is head
    np.testing.assert_allclose(got[:, 0], expected, atol=1e-5)


def test_what_the_record_says_of_the_scored_tokens(reranker):
    info = logit_score.info(reranker[0], reranker[1])
    assert (info.true_token, info.false_token) == ("yes", "no")
    assert info.true_token_id == reranker[0].tokenizer.convert_tokens_to_ids("yes")


def test_the_gpu_instances_trace_of_it_gives_predicts_logits_on_other_shapes(reranker, tmp_path):
    """TorchScript, as GPU instances run it (traced here on the CPU: the converter's code on CUDA)."""
    import copy

    import torch

    from embedgate.converters.library import gpu, module_stack

    transformer, score = reranker[0], reranker[1]
    expected = reranker.predict([list(pair) for pair in PAIRS], activation_fn=torch.nn.Identity())
    ids = [reranker.preprocess([list(pair)])["input_ids"][0].tolist() for pair in PAIRS]
    names = ("input_ids", "attention_mask")
    example = [torch.from_numpy(value) for value in parity.pad(ids[:2]).values()]
    with logit_score.narrowed_head(transformer, score), module_stack.index_based_masks():
        graph = logit_score.graph(transformer, score, names, "text")
        info = gpu.build_module(
            lambda dtype, device: copy.deepcopy(graph).to(device=device, dtype=dtype), example, tmp_path,
            lambda run, half: parity.check_scores(run, ids, None, expected, 1e-4), lambda line: None,
            input_names=names, half=False, device="cpu",
        )
    assert info.dtype == "float32" and info.parity.max_abs_error <= 1e-4
