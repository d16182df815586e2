"""Text in, embeddings out: tokenize off the loop, call Triton, normalize.

This is the narrow interface between the HTTP side and the compute side: routes call
:meth:`EmbeddingService.embed_texts` and never see tensors or Triton.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from .preprocess.text import bucket_length
from .registry import ModelRegistry, ServedModel
from .settings import Settings
from .triton.client import TritonClient


@dataclass(frozen=True)
class Embeddings:
    vectors: np.ndarray  # float32 [n, dim]
    token_counts: list[int]
    truncated: int
    tokenize_ms: float
    inference_ms: float


class EmbeddingService:
    def __init__(self, settings: Settings, registry: ModelRegistry, client: TritonClient):
        self.settings = settings
        self.registry = registry
        self.client = client
        self._pool = ThreadPoolExecutor(settings.tokenizer_threads, thread_name_prefix="tokenize")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def embed_texts(
        self, model: ServedModel, texts: list[str], *, normalize: bool, timeout_s: float
    ) -> Embeddings:
        with self.registry.admit(model):
            loop = asyncio.get_running_loop()
            started = time.perf_counter()
            batch = await loop.run_in_executor(
                self._pool, model.tokenizer.encode, texts, model.metadata.form == "onnxruntime"
            )
            tokenized = time.perf_counter()
            limit = model.metadata.max_batch_size
            if len(texts) <= limit:
                vectors = await self.client.embed(
                    model.triton_name, batch.input_ids, batch.attention_mask, timeout_s=timeout_s
                )
            else:
                vectors = await self._embed_chunked(model, batch, limit, timeout_s)
            finished = time.perf_counter()
        if normalize and not model.metadata.normalized:
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors = vectors / np.maximum(norms, 1e-12)
        return Embeddings(
            vectors=vectors,
            token_counts=batch.token_counts,
            truncated=batch.truncated,
            tokenize_ms=(tokenized - started) * 1000,
            inference_ms=(finished - tokenized) * 1000,
        )

    async def _embed_chunked(self, model: ServedModel, batch, limit: int, timeout_s: float) -> np.ndarray:
        # Sort by length so each chunk pads little, send chunks concurrently (Triton
        # batches them), then put rows back in request order.
        counts = np.asarray(batch.token_counts)
        order = np.argsort(counts, kind="stable")
        calls = []
        for start in range(0, len(order), limit):
            rows = order[start : start + limit]
            width = int(counts[rows].max())
            if model.metadata.form == "onnxruntime":
                width = bucket_length(width, model.tokenizer.max_length)
            calls.append(
                self.client.embed(
                    model.triton_name,
                    np.ascontiguousarray(batch.input_ids[rows, :width]),
                    np.ascontiguousarray(batch.attention_mask[rows, :width]),
                    timeout_s=timeout_s,
                )
            )
        parts = await asyncio.gather(*calls)
        sorted_vectors = np.concatenate(parts)
        vectors = np.empty_like(sorted_vectors)
        vectors[order] = sorted_vectors
        return vectors
