"""A model's prompts, recorded for the gateway to apply as sentence-transformers does.

``SentenceTransformer.encode(texts, prompt_name=...)`` prepends the prompt's text to each
text before tokenizing and runs the same modules; the gateway prepends it before its own
tokenizer and runs the same graph, so a prompt needs nothing in the graph. Except where a
Pooling module has ``include_prompt=False``: it leaves the prompt's tokens out of the
pooled mean, which needs the prompt's length in tokens, and the exported graph takes token
ids and a mask only. Such a model's prompts are refused, with the reason recorded, rather
than served wrong; a non-empty default prompt, which every request would get, refuses the
conversion.
"""

from __future__ import annotations

from dataclasses import dataclass

from embedgate.contract.errors import UnsupportedModelError


@dataclass(frozen=True)
class Prompts:
    prompts: dict[str, str]
    default_prompt_name: str | None
    refused: str | None  # why requests may not use a non-empty prompt, where they may not


def read_prompts(model, modules=None) -> Prompts:
    """The loaded model's prompts and default prompt name, and whether they can be served
    (``modules``: every module a text may go through, each route's; the model's own by default)."""
    prompts = {str(name): str(text or "") for name, text in (getattr(model, "prompts", None) or {}).items()}
    default = getattr(model, "default_prompt_name", None)
    modules = model if modules is None else modules
    excluding = [module for module in modules if getattr(module, "include_prompt", True) is False]
    if not excluding:
        return Prompts(prompts, default, None)
    reason = (
        f"its {type(excluding[0]).__name__} module leaves the prompt's tokens out of pooling "
        "(include_prompt=False), which the exported graph cannot do"
    )
    if default is not None and prompts.get(default):
        raise UnsupportedModelError(
            f"unsupported model: its default prompt '{default}' applies to every text, and {reason}"
        )
    return Prompts(prompts, default, reason)
