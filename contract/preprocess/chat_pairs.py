"""(query, document) pairs through a cross-encoder's chat template: the tokenization of LLM
rerankers (Qwen3-Reranker and its kind), as sentence-transformers' ``Transformer.preprocess``
makes it for a model whose tokenizer has a chat template.

The library turns a pair into a "query" and a "document" message (after a "system" message
holding the prompt, where ``predict`` has one), renders them with the template, tokenizes
the rendered text without the tokenizer's own special tokens (the template writes its
own), cuts it to the max length, and writes the template's fixed tail back over the last
tokens of a row it cut: the tail is the assistant's turn whose next token the model scores.
The gateway has no template engine: the converter rendered the template around markers and
recorded its fixed text (``contract/kinds/cross_encoder.py``: ``Rendering``), checked to
reproduce the template on every parity pair; here a pair is put between that text and
tokenized as the library tokenizes it. The tail is found as the library finds it: the
common end of two renders whose texts differ (``"0"`` and ``"1 2 3 4"``), with the prompt
kept. The converter checks this very code against ``CrossEncoder.preprocess``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import NamedTuple

from embedgate.contract.kinds.cross_encoder import ChatTemplate
from embedgate.contract.preprocess.text import PairTokenizer, TokenBatch, padded

# The texts the library renders a conversation's skeleton with to find the template's tail.
SKELETON_FILLERS = ("0", "1 2 3 4")
# Tails kept, one per prompt (the library keeps 256 too).
_TAILS_KEPT = 256


class PromptedPair(NamedTuple):
    """A pair and the prompt its chat template renders as the system message ("": none).
    The pair's texts come first, so what counts a pair's characters counts them."""

    query: str
    document: str
    prompt: str = ""


class ChatPairTokenizer(PairTokenizer):
    """Pairs rendered by a chat template and tokenized whole; a single text has no rendering
    (the served kind refuses it before it comes here)."""

    def __init__(self, tokenizer_file: Path, max_length: int, template: ChatTemplate):
        super().__init__(tokenizer_file, max_length)
        self.template = template
        self._tokenizer.enable_truncation(
            max_length=max_length, strategy="longest_first", direction=template.truncation_side
        )
        self._tails: OrderedDict[str, list[int]] = OrderedDict()
        self._tails_lock = threading.Lock()

    def render(self, pair: PromptedPair | tuple[str, str]) -> str:
        query, document, prompt = PromptedPair(*pair)
        rendering = self.template.prompted if prompt else self.template.plain
        return rendering.render(query, document, prompt)

    def encode(self, pairs: list, pad_to_bucket: bool = False) -> TokenBatch:  # type: ignore[override]
        encodings = self._tokenizer.encode_batch_fast([self.render(pair) for pair in pairs], add_special_tokens=False)
        rows = [list(encoding.ids) for encoding in encodings]
        if self.template.restore_suffix:
            for pair, ids in zip(pairs, rows):
                # Only a row that reached max_length can have lost its tail.
                if len(ids) >= self.max_length:
                    tail = self.tail(PromptedPair(*pair).prompt)
                    keep = min(len(tail), len(ids))
                    if keep:
                        ids[len(ids) - keep :] = tail[len(tail) - keep :]
        return padded(rows, [bool(encoding.overflowing) for encoding in encodings], pad_to_bucket, self.max_length)

    def tail(self, prompt: str) -> list[int]:
        """The template's fixed tail for pairs with ``prompt``: the tokens two renders of
        different texts end alike in (none where they never differ)."""
        with self._tails_lock:
            known = self._tails.get(prompt)
        if known is not None:
            return known
        rendering = self.template.prompted if prompt else self.template.plain
        first, second = (
            self.whole().encode(rendering.render(filler, filler, prompt), add_special_tokens=False).ids
            for filler in SKELETON_FILLERS
        )
        count = 0
        for left, right in zip(reversed(first), reversed(second)):
            if left != right:
                break
            count += 1
        tail = first[len(first) - count :] if 0 < count < min(len(first), len(second)) else []
        with self._tails_lock:
            self._tails[prompt] = tail
            while len(self._tails) > _TAILS_KEPT:
                self._tails.popitem(last=False)
        return tail
