"""Serving on the GPU, end to end, where the host has one (an NVIDIA GPU and PyTorch with
CUDA; elsewhere these tests are skipped, and the CPU path is what the rest of the suite
checks): a sentence-transformer loaded through the API gets GPU instances running its
float16 TorchScript graph, and serves what the float32 PyTorch model computes."""

from __future__ import annotations

import numpy as np
import pytest

from embedgate.api.triton import gpus
from embedgate.converters.spec import TORCH_FILE
from embedgate.converters.triton_config import parse
from tests import tiny_models
from tests.helpers import cosine_rows

pytestmark = pytest.mark.skipif(not gpus.available(), reason="needs an NVIDIA GPU and PyTorch with CUDA")

HALF_THRESHOLD = 0.999
TEXTS = [
    "a",
    "embedding servers batch requests of different lengths",
    "the quick brown fox jumps over the lazy dog " * 12,
] + [f"sentence number {i} about a man eating food at the bank" for i in range(40)]


def test_a_sentence_transformer_serves_on_gpu_instances_in_float16_at_parity(gateway, tmp_path):
    from sentence_transformers import SentenceTransformer

    model_dir = tiny_models.dense_model(tmp_path / "bert")
    with gateway.client() as http:
        loaded = http.post("/load_sentence_transformer_model", json={"model_name": "gpu/bert", "model_path": str(model_dir)})
        assert loaded.status_code == 200, loaded.text
        (listed,) = [m for m in http.get("/loaded_models").json()["models"] if m["model_name"] == "gpu/bert"]
        assert listed["gpu_dtype"] == "float16"
        assert listed["gpu_parity_min_cosine"] >= HALF_THRESHOLD

        config = parse((gateway.repository / listed["triton_name"] / "config.pbtxt").read_text())
        assert config.parameters["torch_file"].string_value == TORCH_FILE
        assert config.parameters["torch_device"].string_value == "cuda"
        assert (gateway.repository / listed["triton_name"] / "1" / TORCH_FILE).is_file()

        served = http.post("/infer", json={"model_name": "gpu/bert", "text": TEXTS})
        assert served.status_code == 200, served.text
        # Texts of their own: the batch's would come back from the response cache.
        lone_texts = [f"{text} (alone)" for text in TEXTS[:3]]
        lone = [http.post("/infer", json={"model_name": "gpu/bert", "text": [t]}) for t in lone_texts]
        assert [r.headers["x-cached-inputs"] for r in lone] == ["0"] * len(lone_texts)
        alone = [r.json()["text_embeddings"][0] for r in lone]
        assert http.post("/delete_model", json={"model_name": "gpu/bert"}).status_code == 200

    reference_model = SentenceTransformer(str(model_dir), device="cpu")
    reference = reference_model.encode(TEXTS)
    assert cosine_rows(np.asarray(served.json()["text_embeddings"]), reference).min() >= HALF_THRESHOLD
    assert cosine_rows(np.asarray(alone), reference_model.encode(lone_texts)).min() >= HALF_THRESHOLD
