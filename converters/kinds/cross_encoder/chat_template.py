"""A cross-encoder's chat template, read into what the gateway renders a pair with.

sentence-transformers gives a pair to a transformer that takes chat messages (a tokenizer
with a chat template: LLM rerankers) as a "query" and a "document" message, after a
"system" message holding the prompt where ``predict`` has one, and renders them with the
template (``Transformer.preprocess``). The gateway runs no template engine: the template is
rendered here with markers in place of the texts, and what surrounds them is recorded
(``contract/kinds/cross_encoder.py``: ``ChatTemplate``). That is exact only for a template
that puts the texts in as they are and whose own text does not depend on them, so both are
checked: a second render with other markers must split alike, and every parity pair (with
and without a prompt) must render to the template's very text. The tokens are then checked
against the library's (``converter.py``), with the gateway's own tokenizer
(``contract/preprocess/chat_pairs.py``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from embedgate.contract.errors import ParityError, UnsupportedModelError
from embedgate.contract.kinds.cross_encoder import ChatTemplate, Rendering, Slot
from embedgate.contract.preprocess.chat_pairs import ChatPairTokenizer, PromptedPair
from embedgate.converters.kinds.cross_encoder import reference

# Private-use characters only: no template writes them, and no filter changes them (upper,
# lower, trim...), so a template that changes a text is caught by the renders of real ones.
MARKERS: dict[Slot, str] = {"query": "\ue000\ue001\ue000", "document": "\ue000\ue002\ue000", "prompt": "\ue000\ue003\ue000"}
OTHER_MARKERS: dict[Slot, str] = {"query": "\ue004\ue001\ue004", "document": "\ue004\ue002\ue004", "prompt": "\ue004\ue003\ue004"}
# apply_chat_template's size arguments tokenize and never reach the template; restore_suffix
# is sentence-transformers' own flag.
_NOT_TEMPLATE_ARGUMENTS = frozenset({"padding", "truncation", "max_length", "return_tensors", "restore_suffix"})
# A prompt the checks render with where the model has none of its own.
PROBE_PROMPT = "Judge whether the document answers the query."


def uses_chat_template(transformer) -> bool:
    """Whether the library gives this transformer its pairs as chat messages."""
    return "message" in (getattr(transformer, "modality_config", None) or {})


def read(transformer) -> ChatTemplate:
    """The model's chat template as the gateway renders it; refused where that could not be
    exact (a multimodal processor, a template that drops the query or the document, changes
    them, or whose own text depends on them)."""
    from transformers import PreTrainedTokenizerBase

    processor = transformer.processor
    if not isinstance(processor, PreTrainedTokenizerBase):
        raise UnsupportedModelError(
            f"unsupported cross-encoder: its chat messages go through a {type(processor).__name__} (a multimodal "
            "processor); embedgate renders the chat templates of text tokenizers"
        )
    settings = dict(transformer.processing_kwargs.get("chat_template", {}))
    truncation = settings.get("truncation", transformer.processing_kwargs.get("text", {}).get("truncation", True))
    return ChatTemplate(
        plain=_rendering(transformer, prompted=False),
        prompted=_rendering(transformer, prompted=True),
        truncation_side="left" if processor.truncation_side == "left" else "right",
        restore_suffix=bool(settings.get("restore_suffix", True)) and truncation not in (False, "do_not_truncate"),
    )


def render(transformer, query: str, document: str, prompt: str = "") -> str:
    """The text the library renders a pair (and prompt) into, as ``Transformer.preprocess``
    makes the messages."""
    formatter = transformer.input_formatter
    messages = formatter.pair_to_messages((query, document))
    if prompt:
        messages = formatter.prepend_prompt_to_messages([messages], prompt)[0]
    settings = transformer.processing_kwargs.get("chat_template", {})
    arguments = {key: value for key, value in settings.items() if key not in _NOT_TEMPLATE_ARGUMENTS}
    return str(transformer.processor.apply_chat_template(messages, tokenize=False, **arguments))


def check_renders(transformer, template: ChatTemplate, pairs: Sequence[tuple[str, str]], prompts: Sequence[str]) -> None:
    """Every pair, alone and with each prompt, renders to the template's own text."""
    for prompt in ("", *prompts):
        rendering = template.prompted if prompt else template.plain
        for index, (query, document) in enumerate(pairs):
            if rendering.render(query, document, prompt) != render(transformer, query, document, prompt):
                with_prompt = " with a prompt" if prompt else ""
                raise UnsupportedModelError(
                    f"unsupported cross-encoder: its chat template changes the texts it is given, or its own text "
                    f"depends on them (parity pair {index + 1}{with_prompt}: {query[:30]!r}, {document[:30]!r}); "
                    "embedgate renders templates that put the query and the document in as they are"
                )


def check_tokens(
    model, tokenizer_file: Path, max_length: int, template: ChatTemplate, pairs: Sequence[tuple[str, str]],
    expected: list[list[int]], prompts: Sequence[str],
) -> list[list[int]]:
    """The gateway's tokens of ``pairs`` (its own tokenizer: rendering, truncation, the tail
    written back), checked to be the model's (``expected``), and with each of ``prompts``;
    the tokens without a prompt."""
    tokenizer = ChatPairTokenizer(tokenizer_file, max_length, template)
    found: list[list[int]] = []
    for prompt in ("", *prompts):
        want = expected if not prompt else reference.tokens(model, list(pairs), False, prompt=prompt)[0]
        batch = tokenizer.encode([PromptedPair(query, document, prompt) for query, document in pairs])
        ids = [batch.input_ids[row, :count].tolist() for row, count in enumerate(batch.token_counts)]
        wrong = [index for index, (got, expect) in enumerate(zip(ids, want)) if got != expect]
        if wrong:
            with_prompt = " with a prompt" if prompt else ""
            raise ParityError(
                f"the chat template's rendering, tokenized with the published tokenizer.json, does not reproduce the "
                f"model's tokens (pair {wrong[0] + 1} of {len(ids)}{with_prompt})"
            )
        found = found or ids
    return found


def _rendering(transformer, *, prompted: bool) -> Rendering:
    renders = [
        _split(render(transformer, markers["query"], markers["document"], markers["prompt"] if prompted else ""), markers)
        for markers in (MARKERS, OTHER_MARKERS)
    ]
    if renders[0] != renders[1]:
        raise UnsupportedModelError(
            "unsupported cross-encoder: its chat template's own text depends on the query or the document; "
            "embedgate renders templates whose text around them is fixed"
        )
    rendering = renders[0]
    missing = [slot for slot in ("query", "document") if slot not in rendering.slots]
    if missing:
        raise UnsupportedModelError(
            f"unsupported cross-encoder: its chat template leaves out the pair's {' and '.join(missing)} "
            "(it renders no 'query' or 'document' message), so no pair would be scored; sentence-transformers "
            "refuses such a template too"
        )
    return rendering


def _split(text: str, markers: dict[Slot, str]) -> Rendering:
    slot_of = {marker: slot for slot, marker in markers.items()}
    parts = re.split("(" + "|".join(re.escape(marker) for marker in markers.values()) + ")", text)
    return Rendering(segments=parts[0::2], slots=[slot_of[marker] for marker in parts[1::2]])
