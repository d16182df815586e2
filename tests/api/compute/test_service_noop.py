"""No-op inference: the gateway's whole path except the model, for measuring the gateway."""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from embedgate.api.compute.service import EmbeddingService
from embedgate.api.models.registry import ServedModel
from embedgate.api.settings import Settings
from embedgate.contract.preprocess.text import TextTokenizer


class NoTriton:
    async def embed(self, *args, **kwargs):
        raise AssertionError("no-op inference must not call Triton")


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


async def test_noop_inference_tokenizes_and_answers_zero_vectors_without_triton(minilm_path):
    settings = Settings(noop_inference=True)
    client = NoTriton()
    service = EmbeddingService(settings, client)
    tokenizer = TextTokenizer(Path(minilm_path) / "tokenizer.json", 256)
    model = ServedModel("m", "m", Meta(), tokenizer)
    texts = ["a short one", "word " * 300] + [f"text {i}" for i in range(8)]  # more than a Triton batch
    try:
        result = await service.embed_texts(model, texts, normalize=True, timeout_s=5)
    finally:
        service.close()
    assert result.vectors.shape == (10, 384) and result.vectors.dtype == np.float32
    assert not result.vectors.any()
    assert result.token_counts == tokenizer.encode(texts).token_counts
    assert result.truncated == 1
    assert model.inflight == 0
