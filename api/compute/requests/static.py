"""A route the gateway computes itself, with no Triton call: a weight per vocabulary token
(``SparseStaticEmbedding``, the query side of inference-free sparse models).

A text's vector holds, for each vocabulary token it has, that token's stored weight, and
zero for the others, as ``SparseStaticEmbedding.forward`` computes it (a token counts once,
however often it occurs). The converter checks this very function against the library
before the model is published.
"""

from __future__ import annotations

import numpy as np


def static_vectors(weights: np.ndarray, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """[texts, vocabulary] float32: ``weights`` at each text's tokens (under its mask)."""
    rows, width = input_ids.shape
    vectors = np.zeros((rows, weights.shape[0]), dtype=np.float32)
    present = attention_mask.astype(bool)
    row_of = np.broadcast_to(np.arange(rows)[:, None], (rows, width))[present]
    ids = input_ids[present]
    vectors[row_of, ids] = weights[ids]
    return vectors
