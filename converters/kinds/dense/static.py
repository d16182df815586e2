"""A route of a static embedding model (``StaticEmbedding``: model2vec's and
static-retrieval-mrl's embedding bag, often followed by Normalize), which the gateway computes
itself: the mean of a stored vector per token over the ids the tokenizer gives without
special tokens (``contract/static.py``), hundreds of times cheaper than a transformer and
cheaper still without a Triton call.

Saved for the gateway: the tokenizer as the module holds it (its own truncation, if any;
none in most, and then a text is never cut) and the vectors (``weights.npy``). Checked
before publishing with the gateway's own code (its tokenizer, ``mean_vectors``) against the
library's ``encode`` for the route's task, on the parity sentences and an empty text (an
empty bag: zeros), one padded batch and each alone.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from embedgate.contract.errors import ParityError
from embedgate.contract.preprocess.text import TextTokenizer
from embedgate.contract.spec import STATIC_WEIGHTS_FILE, TOKENIZER_DIR
from embedgate.contract.static import mean_vectors
from embedgate.converters.kinds.library import Converted, task_of
from embedgate.converters.library import parity
from embedgate.converters.library.routes import ModuleRoute

STATIC_MODULE = "StaticEmbedding"
# A tokenizer without truncation cuts no text: a limit no text in a request body reaches
# (the gateway's tokenizer always has one).
NO_LIMIT = 2**31 - 1
# Parity sentences for a tokenizer with no limit (or a far one): one long text of this many words.
LONG_TEXT_TOKENS = 256


def is_static(route: ModuleRoute) -> bool:
    return type(route.modules[0]).__name__ == STATIC_MODULE


def refusal(route: ModuleRoute) -> str | None:
    """Why a route that starts with a StaticEmbedding cannot be computed by the gateway, or None."""
    names = [type(module).__name__ for module in route.modules]
    if names not in ([STATIC_MODULE], [STATIC_MODULE, "Normalize"]):
        return (
            f"{route.describe()} is {' -> '.join(names)}; embedgate computes a StaticEmbedding alone or followed "
            "by Normalize"
        )
    truncation = route.modules[0].tokenizer.truncation
    if truncation is not None and truncation.get("direction", "right") != "right":
        return f"{route.describe()}'s tokenizer cuts texts from the {truncation['direction']}"
    return None


def max_length(module) -> int:
    """The most tokens a text keeps: its tokenizer's truncation, or none."""
    truncation = module.tokenizer.truncation
    return int(truncation["max_length"]) if truncation is not None else NO_LIMIT


def convert(model, route: ModuleRoute, files_dir: Path, threshold: float, step) -> Converted:
    """Save the route's tokenizer and vectors into ``files_dir`` and check the gateway's
    computation against ``model.encode`` with the route's task."""
    module = route.modules[0]
    normalize = len(route.modules) == 2
    limit = max_length(module)
    sentences = [*parity.parity_sentences(limit if limit <= 4096 else LONG_TEXT_TOKENS), ""]
    step(
        f"{route.describe()}: a mean of static vectors over {module.num_embeddings} tokens"
        f"{', then Normalize' if normalize else ''}, computed by the gateway"
    )
    features = model.preprocess(sentences, **task_of(route))
    expected_ids = _bags(features["input_ids"].tolist(), features["offsets"].tolist())
    reference = model.encode(sentences, convert_to_numpy=True, prompt="", **task_of(route))

    tokenizer_file = files_dir / TOKENIZER_DIR / "tokenizer.json"
    tokenizer_file.parent.mkdir(parents=True, exist_ok=True)
    module.tokenizer.save(str(tokenizer_file))
    vectors = module.embedding.weight.detach().float().cpu().numpy()
    np.save(files_dir / STATIC_WEIGHTS_FILE, vectors)

    step(f"parity check on {len(sentences)} sentences (the gateway's computation)")
    strip, _ = parity.check_tokenization(tokenizer_file, sentences, expected_ids, add_special_tokens=False)
    tokenizer = TextTokenizer(tokenizer_file, limit, strip, add_special_tokens=False)

    def computed(texts: list[str]) -> np.ndarray:
        batch = tokenizer.encode(texts)
        return mean_vectors(vectors, batch.input_ids, batch.attention_mask, normalize=normalize)

    batched = computed(sentences)
    alone = np.concatenate([computed([text]) for text in sentences])
    checks = {"as one padded batch": parity.cosines(batched, reference), "one sentence at a time": parity.cosines(alone, reference)}
    result, worst = parity.summarize(checks, threshold, len(sentences))
    result.max_abs_error = float(max(np.abs(batched - reference).max(), np.abs(alone - reference).max()))
    if not result.passed:
        raise ParityError(f"parity check failed: min cosine {result.min_cosine:.6f} < threshold {threshold} ({worst})")
    step(f"parity passed: min cosine {result.min_cosine:.6f}, largest difference {result.max_abs_error:.2g}")
    return Converted(
        max_seq_length=limit,
        strip_whitespace=strip,
        parity=result,
        add_special_tokens=False,
        normalized=normalize,
        extras={"dim": int(vectors.shape[1]), "normalized": normalize, "variant": None, "packed_parity": None, "gpu": None},
    )


def _bags(ids: list[int], offsets: list[int]) -> list[list[int]]:
    """Each text's ids from the library's flat ids and each text's offset into them."""
    ends = [*offsets[1:], len(ids)]
    return [ids[start:end] for start, end in zip(offsets, ends)]
