"""Inputs of a vision-language model as token ids: what sentence-transformers makes of a
text or an image for a model whose processor renders every input through a chat template.

The library turns an input into a user message (a prompt, where there is one, into a
system message before it), renders the messages with the processor's chat template, puts
as many image tokens as the image's merged patches where the template wrote one, and
tokenizes the text. The gateway has no template engine: the converter rendered the
messages around markers and recorded the fixed text before and after each input
(``Rendering``, checked to give the library's token ids); here an input is put between
that text and tokenized as the library tokenizes it. A token's modality
(``mm_token_type_ids``) is 1 for the image tokens, 0 for the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# What the converter renders in place of an input and of a prompt (then cut out).
TEXT_MARK = "\u2063TEXT\u2063"
PROMPT_MARK = "\u2063PROMPT\u2063"


@dataclass(frozen=True)
class Around:
    """A rendering's fixed text: ``before`` + the prompt + ``between`` + the input + ``after``
    (``between`` unused without a prompt)."""

    before: str
    between: str
    after: str

    def render(self, text: str, prompt: str = "") -> str:
        return f"{self.before}{prompt}{self.between}{text}{self.after}"


@dataclass(frozen=True)
class Rendering:
    """How the chat template renders a text, and an image (the template's image text in
    place of the input), with and without a prompt."""

    text: Around
    text_prompted: Around
    image: str  # what the template writes for one image (its image token once, to be repeated)
    image_token: str
    image_token_id: int

    def text_of(self, text: str, prompt: str = "") -> str:
        return self.text_prompted.render(text, prompt) if prompt else self.text.render(text)

    def image_of(self, tokens: int, prompt: str = "") -> str:
        """The rendered text of an image that takes ``tokens`` image tokens."""
        expanded = self.image.replace(self.image_token, self.image_token * tokens)
        return self.text_of(expanded, prompt)


def token_batch(tokenizer, rendering: Rendering, rendered: list[str], pad_id: int, left: bool):
    """``input_ids``, ``attention_mask`` and ``mm_token_type_ids`` ``[batch, length]``
    (int64), padded here on the side the model's tokenizer pads (``tokenizer``: a
    ``tokenizers.Tokenizer`` with its own padding and truncation off)."""
    rows = [encoding.ids for encoding in tokenizer.encode_batch(rendered, add_special_tokens=False)]
    length = max(len(row) for row in rows)
    ids = np.full((len(rows), length), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), length), dtype=np.int64)
    for number, row in enumerate(rows):
        place = slice(length - len(row), length) if left else slice(0, len(row))
        ids[number, place] = row
        mask[number, place] = 1
    types = (ids == rendering.image_token_id).astype(np.int64) * mask
    return ids, mask, types
