"""A ``SentenceTransformer``: a dense embedding per text. What it records beyond every
model's fields (a packed graph, int8/uint8 ranges, variants) are fields of
``ModelMetadata`` it shares with other kinds, so it has no record of its own."""

from __future__ import annotations

from embedgate.contract.kinds.base import Kind

KIND = Kind("sentence_transformer", library_class="SentenceTransformer")
