"""The route of an inference-free sparse model that the gateway computes itself: a
``SparseStaticEmbedding`` (a weight per vocabulary token) and its tokenizer, saved for the
gateway (``api/compute/requests/static.py``, held to the module's own computation by its tests), and
the gateway's tokenization of the parity sentences, through the module, checked against the
library's ``encode`` for the route's task."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from embedgate.contract.spec import ATTENTION_MASK, INPUT_IDS, STATIC_WEIGHTS_FILE, TOKENIZER_DIR
from embedgate.converters.kinds.library import Converted
from embedgate.converters.library import module_stack, parity
from embedgate.converters.library.routes import ModuleRoute


def refusal(route: ModuleRoute) -> str | None:
    """Why a route that starts with static weights cannot be computed by the gateway, or None."""
    names = [type(module).__name__ for module in route.modules]
    if len(names) != 1:
        return (
            f"its route '{route.name}' is {' -> '.join(names)}; embedgate computes static weights alone "
            "(SparseStaticEmbedding, with no module after it)"
        )
    tokenizer = getattr(route.modules[0], "tokenizer", None)
    if tokenizer is None or not tokenizer.is_fast:
        return f"its route '{route.name}' has no fast (tokenizers-backed) tokenizer"
    return None


def convert(model, route: ModuleRoute, files_dir: Path, threshold: float, step) -> Converted:
    """Save the route's tokenizer and weights into ``files_dir`` and check the vectors of the
    gateway's tokenization against ``model.encode`` with the route's task."""
    import torch

    module = route.modules[0]
    task = route.task
    # SparseStaticEmbedding tokenizes without special tokens, cut at the tokenizer's own limit.
    max_length = min(int(module.tokenizer.model_max_length), module_stack.MAX_SUPPORTED_SEQ_LENGTH)
    # The long parity sentence past the limit, where the limit is one a sentence can reach.
    sentences = parity.parity_sentences(max_length if max_length <= 4096 else 256)
    step(f"route '{route.name}': static weights over {module.num_dimensions} tokens, computed by the gateway")
    features = model.preprocess(sentences, task=task)
    expected_ids = parity.reference_token_ids(features[INPUT_IDS].numpy(), features[ATTENTION_MASK].numpy())
    reference = model.encode(sentences, task=task, prompt="", convert_to_sparse_tensor=False).float().numpy()

    tokenizer_file = module_stack.save_tokenizer(module.tokenizer, files_dir / TOKENIZER_DIR, max_length, False)
    weights = module.weight.detach().float().cpu().numpy()
    np.save(files_dir / STATIC_WEIGHTS_FILE, weights)

    step(f"parity check on {len(sentences)} sentences (the gateway's computation)")
    strip, token_ids = parity.check_tokenization(tokenizer_file, sentences, expected_ids, add_special_tokens=False)

    def run(feeds):
        with torch.no_grad():
            features = {name: torch.from_numpy(feeds[name]) for name in (INPUT_IDS, ATTENTION_MASK)}
            return module(features)["sentence_embedding"].float().numpy()

    result = parity.check_sparse(run, token_ids, reference, threshold)
    step(f"parity passed: the same non-zero weights, min cosine {result.min_cosine:.6f}")
    return Converted(
        max_seq_length=max_length,
        strip_whitespace=strip,
        parity=result,
        add_special_tokens=False,
        extras={"dim": int(weights.shape[0])},
    )
