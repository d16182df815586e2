"""The official ``openai`` package pointed at the real gateway (which runs the real
tritonserver): embeddings checked against the PyTorch model."""

from __future__ import annotations

import base64

import numpy as np
import openai
import pytest

from tests.helpers import cosine_rows

from .conftest import MINILM

TEXTS = [
    "A man is eating food.",
    "The girl is carrying a baby.",
    "Ünïcödé text, emoji 🚀, and 中文.",
    "A much longer sentence " * 100,  # truncated to the model's max length
]


@pytest.fixture
def client(gateway, minilm_loaded):
    with openai.OpenAI(api_key="unused", base_url=f"{gateway.url}/v1", max_retries=0, timeout=60) as client:
        yield client


@pytest.mark.parametrize("encoding_format", ["float", "base64", None])
def test_embeddings_match_pytorch(client, minilm, encoding_format):
    extra = {"encoding_format": encoding_format} if encoding_format else {}  # None: the client's default
    result = client.embeddings.create(model=MINILM, input=TEXTS, **extra)
    if encoding_format == "base64":  # asked for explicitly, the client leaves it encoded
        served = np.stack([np.frombuffer(base64.b64decode(d.embedding), dtype="<f4") for d in result.data])
    else:  # the client's default asks for base64 and decodes it
        served = np.asarray([d.embedding for d in result.data], dtype=np.float32)
    assert [d.index for d in result.data] == list(range(len(TEXTS)))
    assert result.model == MINILM
    assert cosine_rows(served, minilm.encode(TEXTS)).min() >= 0.9999
    np.testing.assert_allclose(np.linalg.norm(served, axis=1), 1.0, atol=1e-5)


def test_usage_counts_the_models_own_tokens(client, minilm):
    result = client.embeddings.create(model=MINILM, input=TEXTS)
    tokens = int(minilm.tokenize(TEXTS)["attention_mask"].sum())
    assert result.usage.prompt_tokens == result.usage.total_tokens == tokens
    single = client.embeddings.create(model=MINILM, input="hello world")
    assert single.usage.prompt_tokens == 4  # [CLS] hello world [SEP]


def test_dimensions_truncate_and_renormalize_the_pytorch_vectors(client, minilm):
    result = client.embeddings.create(model=MINILM, input=TEXTS[:2], dimensions=64)
    served = np.asarray([d.embedding for d in result.data])
    reference = minilm.encode(TEXTS[:2])[:, :64]
    assert served.shape == (2, 64)
    assert cosine_rows(served, reference).min() >= 0.9999
    np.testing.assert_allclose(np.linalg.norm(served, axis=1), 1.0, atol=1e-5)


def test_models_list_and_retrieve(client):
    assert MINILM in [m.id for m in client.models.list().data]
    model = client.models.retrieve(MINILM)
    assert (model.id, model.object, model.owned_by) == (MINILM, "model", "embedgate")
    assert model.created > 1_600_000_000


def test_errors_raise_the_clients_own_exceptions(client):
    with pytest.raises(openai.NotFoundError) as missing:
        client.embeddings.create(model="nobody/nothing", input="a")
    assert missing.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as too_wide:
        client.embeddings.create(model=MINILM, input="a", dimensions=385)
    assert too_wide.value.param == "dimensions" and "384" in too_wide.value.message
    with pytest.raises(openai.BadRequestError) as tokens:
        client.embeddings.create(model=MINILM, input=[[101, 7592, 102]])
    assert tokens.value.param == "input"


def test_timing_headers_on_the_raw_response(client):
    raw = client.embeddings.with_raw_response.create(model=MINILM, input=["timed"])
    queue, tokenize, inference, total = (
        float(raw.headers[f"x-{name}-time-ms"]) for name in ("queue", "tokenize", "inference", "total")
    )
    assert min(queue, tokenize, inference) >= 0
    assert total + 0.02 >= queue + tokenize + inference  # each header is rounded to 0.01 ms


def test_a_clip_models_text_encoder_answers_through_the_same_endpoint(http, gateway, clip_configs, tmp_path):
    import torch

    from tests.clip_model import build_tiny_clip, reference_model

    tiny = build_tiny_clip(tmp_path / "clip", config_dir=clip_configs)
    body = {"model_name": tiny.model_name, "pretrained": str(tiny.checkpoint)}
    loaded = http.post("/load_clip_model", json=body, timeout=600)
    assert loaded.status_code == 200, loaded.text
    try:
        name = f"{tiny.model_name}:{tiny.checkpoint}"
        texts = ["a photo of a cat", "a diagram"]
        with openai.OpenAI(api_key="unused", base_url=f"{gateway.url}/v1", max_retries=0) as client:
            assert name in [m.id for m in client.models.list().data]
            result = client.embeddings.create(model=name, input=texts)
        served = np.asarray([d.embedding for d in result.data])

        model, _, tokenizer = reference_model(tiny)
        with torch.no_grad():
            reference = model.encode_text(tokenizer(texts), normalize=True).numpy()
        assert cosine_rows(served, reference).min() >= 0.9999
        assert result.usage.prompt_tokens > 0
    finally:
        assert http.post("/delete_model", json=body).status_code == 200
