"""Which prompt a request's texts get, chosen as sentence-transformers chooses it.

A prompt is text prepended to each text before tokenizing (``prompt + text``, as
``SentenceTransformer.encode`` does), so a prompted text is a text like any other: it is
tokenized, counted, truncated and merged with other requests' texts as one. The choice:

- ``prompt``: this text (``""``: none, not even the default), as ``encode(prompt=...)``;
- ``prompt_name``: the model's prompt of that name, as ``encode(prompt_name=...)``;
- ``input_type`` (the word NVIDIA NIM and Cohere use): ``query`` is the model's ``query``
  prompt, ``document`` and ``passage`` whichever of ``document``, ``passage`` (and
  ``corpus``, as ``encode_document`` tries) the model defines, a non-empty one first;
- ``task`` ("query" or "document", as ``encode_query`` and ``encode_document`` set it): the
  model's prompt for it (``query``; ``document``, ``passage`` or ``corpus``), else its
  default prompt, as those methods choose when given no prompt;
- none of them: the model's ``default_prompt_name``, if it has one.

The same request also says which route its texts take (``routes.py``): its ``task``, else
the task its ``input_type`` or its ``prompt_name`` stands for (``query``; ``document``,
``passage``, ``corpus``).

A name the model has no prompt for is refused with the list of its prompts; so is an
``input_type`` where the model has prompts but none for it. A model with no prompts at all
takes an ``input_type`` as no prompt, which is what sentence-transformers gives such a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from embedgate.contract.spec import ModelMetadata

from ...errors import PromptError

InputType = Literal["query", "document", "passage"]
# The model's prompts that serve each input type, in the order they are tried.
_PROMPTS_FOR = {
    "query": ("query",),
    "document": ("document", "passage", "corpus"),
    "passage": ("passage", "document", "corpus"),
}
_UNRECORDED = (
    "it was converted before embedgate recorded prompts; delete it and load it again to use them"
)


# Prompt names that stand for a task, as encode_query and encode_document look for them.
_TASK_OF_PROMPT = {"query": "query", "document": "document", "passage": "document", "corpus": "document"}


@dataclass(frozen=True)
class PromptChoice:
    """What a request asks for (at most one of prompt_name, prompt and input_type; none: the
    model's default, or its task's)."""

    prompt_name: str | None = None
    prompt: str | None = None
    input_type: InputType | None = None
    task: Literal["query", "document"] | None = None

    @property
    def route_task(self) -> str | None:
        """The task whose route the texts take (None: the model's default route)."""
        if self.task is not None:
            return self.task
        if self.input_type is not None:
            return _TASK_OF_PROMPT[self.input_type]
        return _TASK_OF_PROMPT.get(self.prompt_name or "")


DEFAULT = PromptChoice()


def prompt_for(model_name: str, metadata: ModelMetadata, choice: PromptChoice) -> str:
    """The text to prepend to each of the request's texts: ``""`` for none."""
    text, param = _chosen(model_name, metadata, choice)
    refused = metadata.prompts_refused or (_UNRECORDED if metadata.prompts is None else None)
    if text and refused:
        raise PromptError("prompts_unsupported", f"model '{model_name}' takes no prompts: {refused}", param)
    return text


def _chosen(model_name: str, metadata: ModelMetadata, choice: PromptChoice) -> tuple[str, str]:
    """The prompt's text, and the request field that chose it."""
    if choice.prompt is not None:
        return choice.prompt, "prompt"
    prompts = metadata.prompts
    asked = "prompt_name" if choice.prompt_name is not None else "input_type" if choice.input_type else None
    if prompts is None:
        if asked:
            raise PromptError("prompts_unsupported", f"model '{model_name}' takes no prompts: {_UNRECORDED}", asked)
        return "", "prompt_name"
    if choice.prompt_name is not None:
        if choice.prompt_name not in prompts:
            raise _unknown(model_name, prompts, f"no prompt named '{choice.prompt_name}'", "prompt_name")
        return prompts[choice.prompt_name], "prompt_name"
    if choice.input_type is not None:
        present = [name for name in _PROMPTS_FOR[choice.input_type] if name in prompts]
        if not present:
            if prompts:
                raise _unknown(model_name, prompts, f"no prompt for input_type '{choice.input_type}'", "input_type")
            return "", "input_type"
        return next((prompts[name] for name in present if prompts[name]), prompts[present[0]]), "input_type"
    default = metadata.default_prompt_name
    if choice.task is not None:
        # encode_query / encode_document: the task's prompt, the first present, else the default.
        default = next((name for name in _PROMPTS_FOR[choice.task] if name in prompts), default)
    return (prompts.get(default, "") if default is not None else ""), "prompt_name"


def _unknown(model_name: str, prompts: dict[str, str], what: str, param: str) -> PromptError:
    listed = ", ".join(f"'{name}'" for name in prompts) if prompts else "none"
    return PromptError("unknown_prompt", f"model '{model_name}' has {what}; its prompts: {listed}", param)
