"""Inputs of a vision-language model as token ids: what sentence-transformers makes of a
text or an image for a model whose processor renders every input through a chat template.

The library turns an input into a user message (a prompt, where there is one, into a
system message before it), renders the messages with the processor's chat template, puts
as many image tokens as the image's merged patches where the template wrote one, and
tokenizes the text, cut at the max length with the template's last tokens written back
over the end of a row it reached (``_restore_chat_template_suffix``). The gateway has no
template engine: the converter rendered the messages around markers and recorded the
fixed text before and after each input (``MessageTemplate``, checked to give the
library's token ids); here an input is put between that text and tokenized as the library
tokenizes it. A token's modality (``mm_token_type_ids``) is 1 for the image tokens, 0 for
the rest.

Rows are right-padded (the graph attends by the mask; the parity check runs this form).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from embedgate.contract.kinds.vision_language import MessageTemplate
from embedgate.contract.preprocess.prompted import PromptedText
from embedgate.contract.preprocess.text import TextTokenizer, TokenBatch, padded

# What the converter renders in place of an input and of a prompt (then cut out).
TEXT_MARK = "\u2063TEXT\u2063"
PROMPT_MARK = "\u2063PROMPT\u2063"


class ImageTooLong(ValueError):
    """An input with images whose tokens, with the template's, pass the model's max length:
    the library would cut its image tokens and fail."""


class MessageTokenizer(TextTokenizer):
    """The model's tokenizer behind its chat template: a text (a ``PromptedText`` where it
    has a prompt) or an image's run of image tokens, framed, tokenized, cut as the library cuts."""

    def __init__(self, tokenizer_file: Path, max_length: int, template: MessageTemplate):
        super().__init__(tokenizer_file, max_length, add_special_tokens=False)
        self._tokenizer.no_truncation()  # cut here, with the template's end written back
        self.template = template

    def rendered(self, text: str | PromptedText) -> str:
        if isinstance(text, PromptedText):
            return self.template.text_of(text.text, text.prompt)
        return self.template.text_of(text)

    def as_read(self, text: str, prompt: str, add_special_tokens: bool) -> tuple[str, bool]:
        """The text in its chat template, as the library renders it (a prompt as the system
        message): the template's own text holds the special tokens. Without them, the text alone."""
        return (self.template.text_of(text, prompt) if add_special_tokens else prompt + text), False

    def encode(  # type: ignore[override]
        self, texts: list[str | PromptedText], pad_to_bucket: bool = False
    ) -> TokenBatch:
        rows = self._ids([self.rendered(text) for text in texts])
        kept = [self._kept(row) for row in rows]
        return padded(kept, [len(row) > self.max_length for row in rows], pad_to_bucket, self.max_length)

    def encode_images(self, tokens: list[int], prompt: str = "") -> TokenBatch:
        """Images taking ``tokens`` image tokens each, as the library renders them."""
        return self.encode_parts([[count] for count in tokens], prompt, "image")

    def encode_parts(self, inputs: list[list[str | int]], prompt: str = "", noun: str = "input") -> TokenBatch:
        """Inputs of parts (texts, and images as the image tokens each takes), as the library
        renders them; one past the max length is refused (it would cut image tokens)."""
        rows = self._ids([self.template.parts_of(parts, prompt) for parts in inputs])
        for number, row in enumerate(rows):
            if len(row) > self.max_length:
                raise ImageTooLong(
                    f"{noun} {number} takes {len(row)} tokens with the model's chat template, more than its max "
                    f"length of {self.max_length}; the library would cut its image tokens"
                )
        return padded(rows, [False] * len(rows), False, self.max_length)

    def image_tokens(self, batch: TokenBatch) -> np.ndarray:
        """Where ``batch``'s image tokens are (``mm_token_type_ids``)."""
        return (batch.input_ids == self.template.image_token_id).astype(np.int64) * batch.attention_mask

    def _ids(self, rendered: list[str]) -> list[list[int]]:
        return [encoding.ids for encoding in self._tokenizer.encode_batch_fast(rendered, add_special_tokens=False)]

    def _kept(self, row: list[int]) -> list[int]:
        """A row as the library keeps it: one that reaches the max length cut there, the
        template's last tokens written over its end."""
        if len(row) < self.max_length:
            return row
        kept = row[: self.max_length]
        suffix = self.template.suffix_ids
        keep = min(len(suffix), len(kept))
        if keep:
            kept[-keep:] = suffix[-keep:]
        return kept
