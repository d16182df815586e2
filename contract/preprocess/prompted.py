"""Texts whose prompt is left out of pooling (``Pooling(include_prompt=False)``,
INSTRUCTOR-style models).

sentence-transformers puts the prompt before the text (``prompt + text``), runs the whole
through the transformer, and leaves the prompt's first tokens out of the pooled mean: as
many as it counts in the prompt tokenized alone (with the tokenizer's special tokens, less
a last one that is special: the trailing ``[SEP]``), the same count for every text of the
call. Here a prompted text keeps its prompt apart (:class:`PromptedText`) until it is
tokenized, and the tokenizer marks that many first tokens of its row ``PROMPT_TOKEN`` in the
attention mask: the exported graph attends to them and pools the others. So texts of
different prompts (and texts without one) share a batch, each pooled as the library pools
it. The converter checks this very tokenizer, with the graph, against ``encode(prompt=...)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from embedgate.contract.preprocess.text import TextTokenizer, TokenBatch
from embedgate.contract.spec import PROMPT_TOKEN

# Prompts whose token count is remembered (a model's few, and the texts requests send).
_KEPT_PROMPTS = 1024


class PromptedText(NamedTuple):
    """A text and the prompt put before it, apart: its prompt's tokens are not pooled."""

    prompt: str
    text: str


class PromptMarkingTokenizer(TextTokenizer):
    """A model's tokenizer that marks each row's prompt tokens in its attention mask."""

    def __init__(
        self,
        tokenizer_file: Path,
        max_length: int,
        strip_whitespace: bool = False,
        *,
        special_ids: list[int],
    ):
        super().__init__(tokenizer_file, max_length, strip_whitespace)
        self.special_ids = frozenset(special_ids)
        self._prompt_tokens: dict[str, int] = {}

    def encode(self, texts: list[str | PromptedText], pad_to_bucket: bool = False) -> TokenBatch:
        batch = super().encode([_whole(text) for text in texts], pad_to_bucket)
        mask = batch.attention_mask
        for row, text in enumerate(texts):
            if isinstance(text, PromptedText) and text.prompt:
                marked = min(self.prompt_tokens(text.prompt), batch.token_counts[row])
                mask[row, :marked] = PROMPT_TOKEN
        return batch

    def prompt_tokens(self, prompt: str) -> int:
        """How many of a prompted text's first tokens are the prompt's, as sentence-transformers
        counts them (``Transformer._get_prompt_length``)."""
        count = self._prompt_tokens.get(prompt)
        if count is None:
            (encoding,) = self.encodings([prompt])
            ids = encoding.ids
            count = len(ids) - (1 if ids and ids[-1] in self.special_ids else 0)
            if len(self._prompt_tokens) >= _KEPT_PROMPTS:
                self._prompt_tokens.clear()
            self._prompt_tokens[prompt] = count
        return count


def _whole(text: str | PromptedText) -> str:
    return text.prompt + text.text if isinstance(text, PromptedText) else text
