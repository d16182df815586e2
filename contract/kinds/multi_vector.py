"""A ``MultiVectorEncoder`` (ColBERT-style late interaction): a vector per token, and
which tokens a text keeps and how a query is expanded, per task."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from embedgate.contract.kinds.base import Kind, KindRecord


class QueryExpansion(BaseModel):
    """ColBERT's query expansion: a query is padded to ``length`` tokens (strategy "fixed"
    also cuts it there; "min" only pads) with ``token_id``, which the encoder attends to only
    where ``attend``, and every one of those positions is scored."""

    strategy: Literal["fixed", "min"]
    attend: bool
    token_id: int
    length: int = Field(ge=1)


class MultiVectorTask(BaseModel):
    """How a multi-vector model tokenizes and scores the texts of one task."""

    max_length: int = Field(ge=1)
    expansion: QueryExpansion | None = None
    # Token ids whose vectors are left out (MultiVectorMask's skiplist, for its tasks).
    skiplist: list[int] = Field(default_factory=list)
    # Where set, only these token ids' vectors are kept (MultiVectorMask's keep_only_token_ids).
    keep_only: list[int] | None = None


class MultiVectorInfo(KindRecord):
    """A multi-vector (late-interaction) model: its graph gives a vector per token; which
    tokens a text keeps and how a query is expanded depend on the task, as
    ``MultiVectorEncoder.encode_query`` / ``encode_document`` / ``encode`` apply them."""

    key = "multi_vector"

    similarity: Literal["maxsim", "meanmaxsim"]
    query: MultiVectorTask
    document: MultiVectorTask
    default: MultiVectorTask


KIND = Kind("multi_vector_encoder", record=MultiVectorInfo, library_class="MultiVectorEncoder")
