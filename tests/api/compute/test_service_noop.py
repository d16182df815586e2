"""The no-op backend: the gateway's whole path except the model, for measuring the gateway."""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from embedgate.api.compute.backend.noop import NoopBackend
from embedgate.api.compute.service import EmbeddingService
from embedgate.api.models.registry import ServedModel
from embedgate.api.settings import Settings
from embedgate.contract.preprocess.text import TextTokenizer
from tests.api.compute.test_service import embed


@dataclass
class Meta:
    kind: str = "sentence_transformer"
    embedding_dim: int = 384
    max_batch_size: int = 4
    normalized: bool = False
    form: str = "python"
    dynamic_batching: bool = True
    prompts: dict | None = None
    default_prompt_name: str | None = None
    prompts_refused: str | None = None
    calibration: None = None
    routes: None = None
    graph_inputs: None = None  # converted before graph inputs were recorded
    gateway_only: bool = False  # a model in Triton

    def record_of(self, record_class):
        return None  # a sentence-transformer that pools every token, or a model with no record


async def test_the_noop_backend_tokenizes_and_answers_zero_vectors(minilm_path):
    service = EmbeddingService(Settings(noop_inference=True), NoopBackend())
    tokenizer = TextTokenizer(Path(minilm_path) / "tokenizer.json", 256)
    model = ServedModel("m", "m", Meta(), tokenizer)
    texts = ["a short one", "word " * 300] + [f"text {i}" for i in range(8)]  # more than a Triton batch
    try:
        result = await embed(service, model, texts, normalize=True, timeout_s=5)
    finally:
        service.close()
    assert result.vectors.shape == (10, 384) and result.vectors.dtype == np.float32
    assert not result.vectors.any()
    assert result.token_counts == tokenizer.encode(texts).token_counts
    assert result.truncated == 1
    assert model.inflight == 0
