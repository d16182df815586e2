"""Prompts left out of pooling (``Pooling(include_prompt=False)``, INSTRUCTOR-style models).

The library runs ``prompt + text`` through the transformer and pools the tokens after the
prompt's: as many as it counts in the prompt tokenized alone (less a trailing special
token), one count for every text of an ``encode`` call. The exported graph reads which tokens
are a prompt's from the attention mask (``PROMPT_TOKEN``, ``module_stack.stack_graph``) and
the gateway marks them, per row (``contract/preprocess/prompted.py``), so requests of
different prompts still share a batch.

Served where that is the same computation: no Router (each route would need its own), and
a Pooling whose modes read nothing but that mask (``weightedmean`` weighs each token by its
position, which the library counts from the row's first token, the prompt's included, and a
Pooling given the text's mask from the text's first: cosine 0.9995 on a tiny model). The check runs the gateway's tokenizer and the published graph against
``encode(prompt=...)``: each of the model's prompts and others (with and without a trailing
space, one past the max length), each as one batch, then rows of every prompt and none
mixed in one batch, and each of those alone. The packed graph is not built for such models
(it pools each text's tokens from their first).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from embedgate.contract.errors import ParityError
from embedgate.contract.kinds.dense import PromptExclusion
from embedgate.contract.preprocess.prompted import PromptedText, PromptMarkingTokenizer
from embedgate.contract.spec import ATTENTION_MASK, INPUT_IDS
from embedgate.converters.library import parity
from embedgate.converters.library.prompts import excluding
from embedgate.converters.library.routes import ModuleRoute

# Checked besides the model's own: an INSTRUCTOR instruction, one without a trailing space
# (its last token may merge with the text's first), and one alone past most max lengths.
CHECKED_PROMPTS = (
    "Represent the Wikipedia sentence for retrieving supporting documents: ",
    "query:",
)


def refusal(routes: list[ModuleRoute]) -> str | None:
    """Why prompts left out of pooling cannot be served for these routes, or None."""
    if routes[0].name:
        return "which embedgate serves for models without a Router"
    for module in excluding(routes[0].modules):
        mode = getattr(module, "pooling_mode", ())
        modes = mode if isinstance(mode, (tuple, list)) else (mode,)
        if "weightedmean" in modes:
            return (
                "which embedgate does not serve with weightedmean pooling (its weights count a token's position "
                "from the row's first token, the prompt's included)"
            )
    return None


def special_ids(transformer) -> list[int]:
    return sorted({int(token_id) for token_id in transformer.tokenizer.all_special_ids})


def check(
    model,
    run: parity.Run,
    tokenizer_file: Path,
    max_length: int,
    strip_whitespace: bool,
    ids: list[int],
    prompts: Iterable[str],
    threshold: float,
) -> PromptExclusion:
    """The graph ``run`` with the gateway's prompt marks against ``encode(prompt=...)``;
    raises ParityError below ``threshold``."""
    tokenizer = PromptMarkingTokenizer(tokenizer_file, max_length, strip_whitespace, special_ids=ids)
    sentences = parity.parity_sentences(max_length)
    long_prompt = " ".join(["instruction"] * (max_length + 8)) + ": "
    chosen = [prompt for prompt in dict.fromkeys([*prompts, *CHECKED_PROMPTS, long_prompt]) if prompt]
    references = {prompt: model.encode(sentences, prompt=prompt, convert_to_numpy=True) for prompt in ["", *chosen]}

    def embed(texts: list[PromptedText]) -> np.ndarray:
        batch = tokenizer.encode(texts)
        return run({INPUT_IDS: batch.input_ids, ATTENTION_MASK: batch.attention_mask})

    checks = {
        f"prompt {prompt[:40]!r}, one batch": parity.cosines(
            embed([PromptedText(prompt, text) for text in sentences]), references[prompt]
        )
        for prompt in chosen
    }
    # As the gateway merges requests: each row its own prompt, or none.
    options = ["", *chosen]
    mixed = [PromptedText(options[row % len(options)], text) for row, text in enumerate(sentences)]
    expected = np.stack([references[text.prompt][row] for row, text in enumerate(mixed)])
    checks["prompts mixed in one batch"] = parity.cosines(embed(mixed), expected)
    checks["prompts mixed, each alone"] = parity.cosines(np.concatenate([embed([text]) for text in mixed]), expected)
    result, worst = parity.summarize(checks, threshold, len(sentences) * len(chosen))
    if not result.passed:
        raise ParityError(
            f"parity check with prompts left out of pooling failed: min cosine {result.min_cosine:.6f} < "
            f"threshold {threshold} ({worst})"
        )
    return PromptExclusion(special_ids=ids, parity=result)
