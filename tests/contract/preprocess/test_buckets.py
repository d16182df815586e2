"""For the native ONNX Runtime form every tensor the gateway sends has a bucket's width,
also when a large request is split into chunks, and results come back in request order."""

from pathlib import Path

import numpy as np
import pytest

from embedgate.api.compute.backend.triton import TritonBackend
from embedgate.api.compute.service import EmbeddingService
from embedgate.api.models.registry import ServedModel
from embedgate.api.settings import Settings
from embedgate.contract.preprocess.text import TextTokenizer
from tests.api.compute.test_service import EchoClient, Meta, embed

BUCKETS = {8, 16, 32, 64, 128}


@pytest.fixture
def native_service(minilm_path):
    settings = Settings()
    client = EchoClient()
    tokenizer = TextTokenizer(Path(minilm_path) / "tokenizer.json", 128)
    model = ServedModel("m", "m", Meta(max_batch_size=4, form="onnxruntime"), tokenizer)
    service = EmbeddingService(settings, TritonBackend(client))
    yield service, model, client, tokenizer
    service.close()


async def test_every_chunk_is_padded_to_a_bucket(native_service):
    service, model, client, tokenizer = native_service
    texts = ["word " * n for n in (1, 40, 3, 200, 9, 0, 17, 5, 60, 2, 30)]
    result = await embed(service, model, texts, normalize=False, timeout_s=5)

    assert len(client.shapes) == 3
    assert all(width in BUCKETS for _, width in client.shapes), client.shapes
    # Each chunk's bucket is the smallest that holds its longest text (capped at max length).
    counts = sorted(tokenizer.encode(texts).token_counts)
    chunks = [counts[i : i + 4] for i in range(0, len(counts), 4)]
    assert [width for _, width in client.shapes] == [min(b for b in BUCKETS if b >= max(c)) for c in chunks]
    # Padding changed nothing a model sees: real token counts and first tokens, in order.
    expected = tokenizer.encode(texts)
    np.testing.assert_array_equal(result.vectors[:, 0], expected.attention_mask.sum(1))
    np.testing.assert_array_equal(result.vectors[:, 1], expected.input_ids[:, 1])
