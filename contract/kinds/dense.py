"""A ``SentenceTransformer``: a dense embedding per text. Most of what it records beyond
every model's fields (a packed graph, int8/uint8 ranges, variants, routes) are fields of
``ModelMetadata`` it shares with other kinds; its record of its own says how a prompt's
tokens are pooled, where its Pooling leaves them out, and whether it has a late-chunking
graph (a second Triton model, ``<name>---late``) and, where it was asked for and not built,
why."""

from __future__ import annotations

from pydantic import BaseModel

from embedgate.contract.kinds.base import Kind, KindRecord
from embedgate.contract.metadata_parts import ParityResult

# The late-chunking graph's Triton name is the model's with this after it. "---" joins a
# variant's name otherwise ("<name>---int8"), and "late" is no variant: no other model is named so.
LATE_PART_SUFFIX = "---late"


def late_part_name(triton_name: str) -> str:
    """The Triton name of a sentence-transformer's late-chunking graph."""
    return triton_name + LATE_PART_SUFFIX


def dense_part_names(triton_name: str) -> tuple[str, str]:
    """The Triton names a dense model may have: its graph, and its late-chunking graph
    (where its record says it has one)."""
    return triton_name, late_part_name(triton_name)


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


class LateChunking(BaseModel):
    """The late-chunking graph: a text's tokens through the Transformer once, then each
    chunk's tokens (spans the gateway gives as ``CHUNK_STARTED``/``CHUNK_ENDED``) mean-pooled
    as the model's Pooling pools, then the modules after it (Dense, Normalize...). Checked
    against the library's own token embeddings (``encode(output_value="token_embeddings")``),
    their mean over each span, then the model's modules after its Pooling."""

    parity: ParityResult


class DenseInfo(KindRecord):
    key = "dense"

    # None: its pooling takes every token (any prompt's included), or it has no pooling.
    prompt_exclusion: PromptExclusion | None = None
    # Its late-chunking graph (None: it has none).
    late_chunking: LateChunking | None = None
    # Where the conversion was asked for a late-chunking graph and made none: why (its
    # pooling is not a mean, the graph missed its parity...).
    late_chunking_refusal: str | None = None


KIND = Kind("sentence_transformer", record=DenseInfo, library_class="SentenceTransformer", part_names=dense_part_names)
