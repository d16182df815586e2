"""A ``SentenceTransformer``: a dense embedding per text. Most of what it records beyond
every model's fields (a packed graph, int8/uint8 ranges, variants, routes) are fields of
``ModelMetadata`` it shares with other kinds; its record of its own says how a prompt's
tokens are pooled, where its Pooling leaves them out."""

from __future__ import annotations

from pydantic import BaseModel

from embedgate.contract.kinds.base import Kind, KindRecord
from embedgate.contract.metadata_parts import ParityResult


class PromptExclusion(BaseModel):
    """A Pooling with ``include_prompt=False`` (INSTRUCTOR-style models): the prompt's tokens
    go through the transformer, then are left out of the pooled vector. The library counts a
    prompt's tokens by tokenizing the prompt alone, less a last token that is a special token
    (its trailing ``[SEP]``); the gateway counts them the same way and marks them in the
    attention mask (``PROMPT_TOKEN``), which the graph pools around."""

    # The tokenizer's special token ids (transformers' ``all_special_ids``).
    special_ids: list[int]
    # The graph with prompts marked, against ``encode(prompt=...)``: the model's prompts and
    # others, each row's own, several in one batch.
    parity: ParityResult


class DenseInfo(KindRecord):
    key = "dense"

    # None: its pooling takes every token (any prompt's included), or it has no pooling.
    prompt_exclusion: PromptExclusion | None = None


KIND = Kind("sentence_transformer", record=DenseInfo, library_class="SentenceTransformer")
