"""A model's prompts, recorded for the gateway to apply as sentence-transformers does.

``SentenceTransformer.encode(texts, prompt_name=...)`` prepends the prompt's text to each
text before tokenizing and runs the same modules; the gateway prepends it before its own
tokenizer and runs the same graph, so a prompt needs nothing in the graph. Except where a
Pooling module has ``include_prompt=False``: it leaves the prompt's tokens out of the
pooled vector, which needs to know which tokens are the prompt's. A sentence-transformer
without a Router is served so (the gateway marks them in the attention mask and the graph
pools around them: ``converters/kinds/dense/prompt_exclusion.py``); any other model's prompts
are refused, with the reason recorded, rather than served wrong, and a non-empty default
prompt, which every request would get, refuses its conversion.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from embedgate.contract.errors import UnsupportedModelError

CANNOT = "which the exported graph cannot do"


@dataclass(frozen=True)
class Prompts:
    prompts: dict[str, str]
    default_prompt_name: str | None
    refused: str | None  # why requests may not use a non-empty prompt, where they may not
    # Its pooling leaves a prompt's tokens out, and the graph is to pool around them.
    excluded: bool = False


def excluding(modules: Iterable) -> list:
    """The modules that leave a prompt's tokens out of pooling (``include_prompt=False``)."""
    return [module for module in modules if getattr(module, "include_prompt", True) is False]


def read_prompts(model, modules=None, exclusion_refusal: str | None = CANNOT) -> Prompts:
    """The loaded model's prompts and default prompt name, and whether they can be served
    (``modules``: every module a text may go through, each route's; the model's own by
    default). ``exclusion_refusal``: where a module leaves a prompt's tokens out of pooling,
    why its prompts cannot be served (None: they are, pooled around)."""
    prompts = {str(name): str(text or "") for name, text in (getattr(model, "prompts", None) or {}).items()}
    default = getattr(model, "default_prompt_name", None)
    found = excluding(model if modules is None else modules)
    if not found:
        return Prompts(prompts, default, None)
    if exclusion_refusal is None:
        return Prompts(prompts, default, None, excluded=True)
    reason = (
        f"its {type(found[0]).__name__} module leaves the prompt's tokens out of pooling "
        f"(include_prompt=False), {exclusion_refusal}"
    )
    if default is not None and prompts.get(default):
        raise UnsupportedModelError(
            f"unsupported model: its default prompt '{default}' applies to every text, and {reason}"
        )
    return Prompts(prompts, default, reason)
