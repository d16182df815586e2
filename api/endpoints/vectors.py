"""Embedding vectors in the forms OpenAI's API returns them (``float``, ``base64``), and in the
lower precisions other embedding APIs offer (Cohere's and Voyage's ``int8``, ``uint8``,
``binary``, ``ubinary``: lists of integers, as sentence-transformers' quantize_embeddings
gives them)."""

from __future__ import annotations

import base64
from typing import Literal

import numpy as np

EncodingFormat = Literal["float", "base64", "int8", "uint8", "binary", "ubinary"]


def encode_rows(vectors: np.ndarray, encoding_format: EncodingFormat) -> list:
    """One entry per row: the row itself (serialized as floats, or the integers of a lower
    precision, by orjson), or its float32 little-endian bytes in base64, which is what
    OpenAI's clients decode."""
    if encoding_format == "base64":
        rows = np.ascontiguousarray(vectors, dtype="<f4")
        return [base64.b64encode(row.tobytes()).decode("ascii") for row in rows]
    if encoding_format == "float":
        return list(np.ascontiguousarray(vectors, dtype="<f4"))
    return list(vectors)
