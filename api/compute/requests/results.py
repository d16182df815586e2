"""What the compute side gives back for a request: its rows and where the time went."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from embedgate.contract.preprocess.text import TokenBatch

from .chunking import Chunk


@dataclass(frozen=True)
class SparseVector:
    indices: np.ndarray  # int64, ascending: the vocabulary ids with a weight
    values: np.ndarray  # float32, their weights


@dataclass(frozen=True)
class Embeddings:
    """What one request's text inputs gave: the graph's output per input (float32 [n, dim];
    in a lower precision, its integers; a cross-encoder's scores [n, labels]; a multi-vector
    model's, an object array of [tokens, dim] matrices), and where the time went."""

    vectors: np.ndarray
    token_counts: list[int]
    truncated: int
    tokenize_ms: float
    inference_ms: float
    # Waiting for a tokenizer thread: the request's queue time before any work on it.
    queue_ms: float = 0.0
    # Sparse encoders: each input's non-zero weights (``vectors`` then holds the full ones).
    sparse: list[SparseVector] | None = None
    # Each input: was it cut to the model's max length? (``truncated`` counts them.)
    truncated_rows: list[bool] | None = None
    # Inputs answered from the response cache.
    cached: int = 0
    # A chunked request: each input's chunks (``vectors`` holds their rows, in order).
    chunks: list[list[Chunk]] | None = None

    def rows(self, start: int, stop: int) -> Embeddings:
        """The rows ``start:stop`` of these inputs (one request's of a bulk call's), with
        this call's times."""
        truncated_rows = self.truncated_rows[start:stop] if self.truncated_rows else None
        return Embeddings(
            self.vectors[start:stop],
            self.token_counts[start:stop],
            sum(truncated_rows) if truncated_rows else 0,
            tokenize_ms=self.tokenize_ms,
            inference_ms=self.inference_ms,
            queue_ms=self.queue_ms,
            sparse=self.sparse[start:stop] if self.sparse is not None else None,
            truncated_rows=truncated_rows,
        )


def stack_rows(rows: list[np.ndarray]) -> np.ndarray:
    """Rows as one array: stacked, or, where each row is a matrix (a vector per token, of
    different lengths), an object array of them."""
    if rows and rows[0].ndim >= 2:
        out = np.empty(len(rows), dtype=object)
        for index, row in enumerate(rows):
            out[index] = row
        return out
    return np.stack(rows)


@dataclass(frozen=True)
class Embedded:
    """One tokenizer and Triton pass over the texts of one request or of several merged."""

    batch: TokenBatch
    vectors: np.ndarray
    tokenize_began: float  # perf_counter times
    tokenized: float
    finished: float

    def share(self, rows: slice, arrived: float) -> Embeddings:
        return Embeddings(
            vectors=self.vectors[rows],
            token_counts=self.batch.token_counts[rows],
            truncated=sum(self.batch.truncated_rows[rows]),
            truncated_rows=self.batch.truncated_rows[rows],
            tokenize_ms=(self.tokenized - self.tokenize_began) * 1000,
            inference_ms=(self.finished - self.tokenized) * 1000,
            queue_ms=max(0.0, self.tokenize_began - arrived) * 1000,
        )


@dataclass(frozen=True)
class ImageEmbeddings:
    vectors: np.ndarray  # float32 [n, dim]
    load_ms: float  # fetching, decoding and resizing
    inference_ms: float
