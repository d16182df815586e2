"""Routes the gateway computes itself, with no Triton call, from weights stored beside the
model (``STATIC_WEIGHTS_FILE``), on the token ids its tokenizer gives: each such route's
step (:class:`ComputedHere`: tokenized and computed in the tokenizer pool, nothing
admitted, a batch job's lines together in one computation):

- :class:`TokenWeights`: a weight per vocabulary token (``SparseStaticEmbedding``, the
  query side of inference-free sparse models). A text's vector holds, for each vocabulary
  token it has, that token's stored weight, and zero for the others, as
  ``SparseStaticEmbedding.forward`` computes it (a token counts once, however often it
  occurs); held to the module's own computation by its tests.
- :class:`MeanVectors`: a vector per vocabulary token (``StaticEmbedding``, static
  embedding models): their mean over the text's tokens, then unit length where the model
  normalizes (``contract/static.py``, which the converter checks against the library
  before the model is published).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from embedgate.contract.preprocess.text import TokenBatch
from embedgate.contract.static import mean_vectors

from .results import Embedded, Embeddings
from .steps import Engine, Model, RouteParts, Step, began_then, prefixed


class ComputedHere(Step):
    """A route the gateway computes itself: in the pool, no backend call."""

    joined = True

    def vectors(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """[texts, dim] float32: the route's output for a padded batch of token ids."""
        raise NotImplementedError

    def triton_part(self, route: RouteParts) -> str | None:
        return None

    async def run(
        self, engine: Engine, model: Model, route: RouteParts, inputs: list, prefix: str, timeout_s: float
    ) -> Embeddings:
        arrived = time.perf_counter()
        began, (batch, vectors) = await engine.in_pool(began_then, self._computed, route.tokenizer, inputs, prefix)
        done = time.perf_counter()
        return Embedded(batch, vectors, began, done, done).share(slice(None), arrived)

    def _computed(self, tokenizer: Any, inputs: list, prefix: str) -> tuple[TokenBatch, np.ndarray]:
        batch = tokenizer.encode(prefixed(prefix, inputs))
        return batch, self.vectors(batch.input_ids, batch.attention_mask)


@dataclass(frozen=True, eq=False)
class TokenWeights(ComputedHere):
    weights: np.ndarray  # [vocabulary]

    def vectors(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        return static_vectors(self.weights, input_ids, attention_mask)


@dataclass(frozen=True, eq=False)
class MeanVectors(ComputedHere):
    # [vocabulary, dim]; memory-mapped from the repository, so gateway workers share one copy.
    vectors_of_tokens: np.ndarray
    normalize: bool

    def vectors(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        return mean_vectors(self.vectors_of_tokens, input_ids, attention_mask, normalize=self.normalize)


def static_vectors(weights: np.ndarray, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """[texts, vocabulary] float32: ``weights`` at each text's tokens (under its mask)."""
    rows, width = input_ids.shape
    vectors = np.zeros((rows, weights.shape[0]), dtype=np.float32)
    present = attention_mask.astype(bool)
    row_of = np.broadcast_to(np.arange(rows)[:, None], (rows, width))[present]
    ids = input_ids[present]
    vectors[row_of, ids] = weights[ids]
    return vectors
