"""The one interface every model kind is served behind (``api/compute/kinds/<kind>.py``).

A kind says what its Triton models are, how a request's inputs become their tensors, what
requests it answers (and, for the others, where to go instead), and what the listings show
of it. The embedding service and the registry ask the kind; no other code branches on it.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from embedgate.converters.spec import ATTENTION_MASK, EMBEDDING, INPUT_IDS, TOKENIZER_DIR, ModelKind, ModelMetadata

from ...errors import WrongModelKind
from ..preprocess.text import TextTokenizer, TokenBatch

# part's Triton name -> its local directory (the repository's, or the gateway's cache of a remote one)
Files = Callable[[str], Path]
TOKENIZER_FILE = "tokenizer.json"


class Task(Enum):
    """What a request asks a model for."""

    EMBED = "dense embeddings of texts"
    SPARSE = "sparse embeddings of texts"
    RERANK = "relevance scores of (query, document) pairs"
    IMAGES = "embeddings of images"


class ServedKind:
    """How the gateway serves one model of this kind."""

    name: ClassVar[ModelKind]
    # For messages: "a sentence-transformer (dense text embeddings)".
    title: ClassVar[str]
    tasks: ClassVar[frozenset[Task]]
    # The text graph's output.
    output: ClassVar[str] = EMBEDDING
    # Where each task is asked for, to point a request at the right endpoint.
    ENDPOINTS: ClassVar[dict[Task, str]] = {
        Task.EMBED: "POST /infer or /v1/embeddings",
        Task.SPARSE: "POST /infer (sparse_embeddings)",
        Task.RERANK: "POST /rerank or /v1/rerank",
        Task.IMAGES: "POST /infer or /infer_image with a CLIP model",
    }

    def __init__(self, metadata: ModelMetadata):
        self.metadata = metadata

    def parts(self, triton_name: str) -> tuple[str, ...]:
        """The Triton models it is made of; the first holds the tokenizer."""
        return (triton_name,)

    def part_labels(self, triton_name: str) -> dict[str, dict[str, str]]:
        """Where a model has several parts: each part's Triton name -> what the metrics call
        it (besides the model's name)."""
        return {}

    def tokenizer(self, files: Files, triton_name: str):
        """The text tokenizer saved beside the model (a text per row)."""
        metadata = self.metadata
        return TextTokenizer(
            self.tokenizer_file(files, triton_name), metadata.max_seq_length, metadata.strip_whitespace
        )

    def text_inputs(self, batch: TokenBatch, rows: np.ndarray | slice, width: int) -> dict[str, np.ndarray]:
        """The text graph's tensors for ``rows`` of ``batch``, ``width`` tokens wide."""
        return {
            INPUT_IDS: np.ascontiguousarray(batch.input_ids[rows, :width]),
            ATTENTION_MASK: np.ascontiguousarray(batch.attention_mask[rows, :width]),
        }

    def fixed_width(self) -> int | None:
        """The one sequence length the text graph takes, where it takes only one."""
        return None

    def require(self, task: Task, model_name: str) -> None:
        """Raises :class:`WrongModelKind` unless the model answers ``task``, saying where to
        go instead."""
        if task in self.tasks:
            return
        offers = "; ".join(f"{t.value}: {self.ENDPOINTS[t]}" for t in Task if t in self.tasks)
        raise WrongModelKind(
            f"model '{model_name}' is {self.title} and gives no {task.value} (what it gives: {offers})"
        )

    def listing(self) -> dict[str, Any]:
        """Fields of this kind in the model listings."""
        return {}

    @staticmethod
    def tokenizer_file(files: Files, part: str) -> Path:
        return files(part) / TOKENIZER_DIR / TOKENIZER_FILE
