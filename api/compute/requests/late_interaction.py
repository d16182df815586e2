"""Late interaction (ColBERT): a multi-vector model's token vectors, and MaxSim.

The encoder gives a vector per position of a batch; a text keeps those of the positions its
tokenization marks as scored (``preprocess/multi_vector.py``), as ``MultiVectorEncoder``
slices its output by ``MultiVectorMask``'s mask. A query's score against a document is the
sum, over the query's vectors, of the largest dot product with any of the document's
vectors (MaxSim, ``sentence_transformers.util.maxsim``); "meanmaxsim" divides it by the
query's vector count.
"""

from __future__ import annotations

import numpy as np


def token_rows(vectors: np.ndarray, scored: np.ndarray) -> np.ndarray:
    """Each row's kept vectors: an object array of float32 [kept, dim] matrices, one per row
    of ``vectors`` [rows, width, dim] (``scored``: bool [rows, at least width])."""
    rows = np.empty(len(vectors), dtype=object)
    width = vectors.shape[1]
    for row in range(len(vectors)):
        rows[row] = np.ascontiguousarray(vectors[row][scored[row, :width]], dtype=np.float32)
    return rows


def normalized(rows: np.ndarray) -> np.ndarray:
    """Every token vector at unit length (``encode(normalize_embeddings=True)``)."""
    out = np.empty(len(rows), dtype=object)
    for index, matrix in enumerate(rows):
        out[index] = matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
    return out


def maxsim(query: np.ndarray, documents: np.ndarray, *, mean: bool = False) -> np.ndarray:
    """float32 [documents]: MaxSim of ``query`` [tokens, dim] against each document's
    [tokens, dim] matrix (a document without vectors scores 0)."""
    scores = np.zeros(len(documents), dtype=np.float32)
    query = query.astype(np.float32)
    for index, document in enumerate(documents):
        if len(document) and len(query):
            scores[index] = (query @ document.astype(np.float32).T).max(axis=1).sum(dtype=np.float64)
    if mean and len(query):
        scores /= len(query)
    return scores
