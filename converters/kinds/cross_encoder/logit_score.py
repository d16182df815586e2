"""A causal LM scored by its next token: sentence-transformers' ``Transformer`` with
``transformer_task: text-generation`` then ``LogitScore`` (Qwen3-Reranker and its kind).

The library runs the LM on left-padded pairs, keeps the logits of the last position (a
real token, under left padding) over the whole vocabulary, and scores
``logit(true token) - logit(false token)``. The graph exported here computes the same with
what it needs only: the LM's output head cut to the rows of the scored tokens (two rows of
a vocabulary of 150,000, so the graph holds no copy of the head), run as the model's own
forward runs it (any scaling or soft-capping it applies to logits applies to each logit
alone), the logits taken at each row's last real token (the gateway pads on the right:
nothing after a token changes it in a causal LM), then the library's ``LogitScore`` over
those rows. Parity against ``CrossEncoder.predict`` decides.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

from embedgate.contract.errors import UnsupportedModelError
from embedgate.contract.kinds.cross_encoder import LogitScoreInfo
from embedgate.contract.spec import ATTENTION_MASK, SCORES

LOGIT_SCORE = "LogitScore"


def refusal(modules: Sequence) -> str | None:
    """Why ``Transformer -> LogitScore`` cannot be served as the library computes it, or None."""
    transformer, score = modules
    task = getattr(transformer, "transformer_task", None)
    if task != "text-generation":
        return f"its transformer's task before LogitScore is {task!r}; embedgate serves text-generation (causal LM) rerankers"
    if score.module_input_name != transformer.module_output_name:
        return (
            f"its LogitScore reads {score.module_input_name!r}, which its transformer does not give "
            f"({transformer.module_output_name!r})"
        )
    return None


def info(transformer, score) -> LogitScoreInfo:
    tokenizer = transformer.tokenizer
    false_id = score.false_token_id
    return LogitScoreInfo(
        true_token_id=int(score.true_token_id),
        false_token_id=None if false_id is None else int(false_id),
        true_token=str(tokenizer.convert_ids_to_tokens(int(score.true_token_id))),
        false_token=None if false_id is None else str(tokenizer.convert_ids_to_tokens(int(false_id))),
    )


@contextlib.contextmanager
def narrowed_head(transformer, score) -> Iterator[None]:
    """The LM's output head cut to the rows ``score`` reads (true, then false), while the
    block runs; the whole head is put back after."""
    import torch

    model = transformer.auto_model
    head = model.get_output_embeddings()
    if type(head) is not torch.nn.Linear:
        raise UnsupportedModelError(
            f"unsupported cross-encoder: its LM's output head is a {type(head).__name__}; embedgate cuts a "
            "Linear head to the scored tokens' rows"
        )
    parent, name = _owner(model, head)
    rows = [score.true_token_id] + ([] if score.false_token_id is None else [score.false_token_id])
    narrow = torch.nn.Linear(head.in_features, len(rows), bias=head.bias is not None)
    with torch.no_grad():
        narrow.weight.copy_(head.weight[rows])
        if head.bias is not None:
            narrow.bias.copy_(head.bias[rows])
    setattr(parent, name, narrow.to(head.weight.dtype))
    try:
        yield
    finally:
        setattr(parent, name, head)


def graph(transformer, score, input_names: Sequence[str], modality: str, after: Callable | None = None):
    """The scoring graph (``input_names`` in, one score per row out) over ``transformer``
    (whose head ``narrowed_head`` has cut) and a ``LogitScore`` of the kept rows."""
    import torch

    kept = type(score)(
        true_token_id=0, false_token_id=None if score.false_token_id is None else 1,
        module_input_name=score.module_input_name,
    )

    class NextTokenScore(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.transformer = transformer
            self.score = kept

        def forward(self, *inputs):
            features = dict(zip(input_names, inputs))
            mask = features[ATTENTION_MASK]
            features["modality"] = modality
            logits = self.transformer(features)[self.transformer.module_output_name]
            # Each row's last real token: the last position its mask keeps, whichever side it was padded on.
            positions = torch.arange(mask.shape[1], device=mask.device).unsqueeze(0)
            last = (positions * mask).argmax(dim=1)
            rows = torch.arange(mask.shape[0], device=mask.device)
            at_last = logits[rows, last].unsqueeze(1)
            scores = self.score({self.score.module_input_name: at_last})[SCORES]
            if after is not None:
                scores = after(scores)
            return scores.to(torch.float32)

    return NextTokenScore().eval()


def _owner(model, module) -> tuple[object, str]:
    """The module holding ``module`` as an attribute, and the attribute's name."""
    for path, candidate in model.named_modules():
        if candidate is module:
            parent_path, _, name = path.rpartition(".")
            return (model.get_submodule(parent_path) if parent_path else model), name
    raise UnsupportedModelError("unsupported cross-encoder: its LM's output head is not one of its modules")
