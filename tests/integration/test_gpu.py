"""Serving on the GPU, end to end, where the host has one (an NVIDIA GPU and PyTorch with
CUDA; elsewhere these tests are skipped, and the CPU path is what the rest of the suite
checks): a sentence-transformer loaded through the API gets GPU instances running its
float16 TorchScript graph as CUDA graphs of bucketed shapes, and serves what the float32
PyTorch model computes at each bucket's edges (its shortest and its longest texts, alone
and as a full bucket); an OpenCLIP model's two towers run there too; each model's GPU
memory is what the GPU says its processes hold, and a GPU memory budget unloads to make room."""

from __future__ import annotations

import base64
import io
import random
import subprocess

import numpy as np
import pytest

from embedgate.api.triton import gpus
from embedgate.contract.spec import TORCH_FILE
from embedgate.converters.triton_config import parse
from tests import tiny_models
from tests.clip_model import build_tiny_clip, reference_model
from tests.helpers import cosine_rows

from .conftest import model_stubs, start_gateway

pytestmark = pytest.mark.skipif(not gpus.available(), reason="needs an NVIDIA GPU and PyTorch with CUDA")

HALF_THRESHOLD = 0.999
TEXTS = [
    "a",
    "embedding servers batch requests of different lengths",
    "the quick brown fox jumps over the lazy dog " * 12,
] + [f"sentence number {i} about a man eating food at the bank" for i in range(40)]


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory):
    return build_tiny_clip(tmp_path_factory.mktemp("tiny-clip"))


@pytest.fixture(scope="module")
def gpu_gateway(tmp_path_factory, tiny_clip):
    gateway = start_gateway(
        tmp_path_factory.mktemp("gpu_repository"),
        tmp_path_factory.mktemp("logs") / "gpu-gateway.log",
        clip_model_config_dir=str(tiny_clip.config_dir),
        max_batch_size="64",
    )
    yield gateway
    gateway.stop()


@pytest.fixture(scope="module")
def dense(gpu_gateway, tmp_path_factory):
    from sentence_transformers import SentenceTransformer

    model_dir = tiny_models.dense_model(tmp_path_factory.mktemp("gpu") / "bert")
    with gpu_gateway.client() as http:
        loaded = http.post("/load_sentence_transformer_model", json={"model_name": "gpu/bert", "model_path": str(model_dir)})
        assert loaded.status_code == 200, loaded.text
        (listed,) = [m for m in http.get("/loaded_models").json()["models"] if m["model_name"] == "gpu/bert"]
    return listed, SentenceTransformer(str(model_dir), device="cpu")


def test_a_sentence_transformer_serves_on_gpu_instances_in_float16_at_parity(gpu_gateway, dense):
    listed, reference_model_ = dense
    assert listed["gpu_dtype"] == "float16"
    assert listed["gpu_parity_min_cosine"] >= HALF_THRESHOLD
    config = parse((gpu_gateway.repository / listed["triton_name"] / "config.pbtxt").read_text())
    assert config.parameters["torch_file"].string_value == TORCH_FILE
    assert config.parameters["torch_device"].string_value == "cuda"
    assert (gpu_gateway.repository / listed["triton_name"] / "1" / TORCH_FILE).is_file()

    with gpu_gateway.client() as http:
        served = http.post("/infer", json={"model_name": "gpu/bert", "text": TEXTS})
        assert served.status_code == 200, served.text
        # Texts of their own: the batch's would come back from the response cache.
        lone_texts = [f"{text} (alone)" for text in TEXTS[:3]]
        lone = [http.post("/infer", json={"model_name": "gpu/bert", "text": [t]}) for t in lone_texts]
    assert [r.headers["x-cached-inputs"] for r in lone] == ["0"] * len(lone_texts)
    alone = [r.json()["text_embeddings"][0] for r in lone]
    reference = reference_model_.encode(TEXTS)
    assert cosine_rows(np.asarray(served.json()["text_embeddings"]), reference).min() >= HALF_THRESHOLD
    assert cosine_rows(np.asarray(alone), reference_model_.encode(lone_texts)).min() >= HALF_THRESHOLD


def _texts_of(tokenizer, tokens: int, count: int, rng: random.Random, words: list[str]) -> list[str]:
    """``count`` distinct texts of exactly ``tokens`` tokens (special tokens included), of
    words that are one token each; ``count`` at most the texts of that many words there are."""
    assert count <= len(words) ** (tokens - 2), f"{len(words)} words make fewer than {count} texts of {tokens} tokens"
    texts: list[str] = []
    for _ in range(100 * count):
        text = " ".join(rng.choice(words) for _ in range(tokens - 2))
        if len(tokenizer(text)["input_ids"]) == tokens and text not in texts:
            texts.append(text)
            if len(texts) == count:
                return texts
    raise AssertionError(f"found {len(texts)} of {count} distinct texts of {tokens} tokens")


def test_cuda_graphs_keep_parity_at_every_edge_of_their_buckets(gpu_gateway, dense):
    """For buckets across the widths: the shortest and the longest text the bucket holds,
    each alone (a batch of one) and as a full bucket of texts of one length (which the
    model runs as one batch: equal lengths are not cut). The narrowest bucket's shortest
    text is one word: its full bucket takes the shortest texts there are enough of (the
    tiny tokenizer has fewer one-token words than a bucket has rows)."""
    listed, reference_model_ = dense
    config = parse((gpu_gateway.repository / listed["triton_name"] / "config.pbtxt").read_text())
    rows = [int(v) for v in config.parameters["graph_rows"].string_value.split(",")]
    widths = [int(v) for v in config.parameters["graph_widths"].string_value.split(",")]
    limit = int(config.parameters["graph_max_tokens"].string_value)
    assert rows[0] == 1 and rows[-1] == 64 and widths[-1] == reference_model_.max_seq_length

    tokenizer = reference_model_.tokenizer
    words = [w for w in tokenizer.get_vocab() if w.isalpha() and w.isascii() and len(tokenizer(w)["input_ids"]) == 3]
    rng = random.Random(0)
    checked = []
    for index in sorted({0, len(widths) // 2, len(widths) - 1}):
        width = widths[index]
        shortest = (widths[index - 1] if index else 2) + 1
        full = max(r for r in rows if not limit or r * width <= limit)
        for tokens in (shortest, width):
            batch_tokens = tokens
            while len(words) ** (batch_tokens - 2) < 2 * full:
                batch_tokens += 1
            batch = _texts_of(tokenizer, batch_tokens, full, rng, words)
            lone = _texts_of(tokenizer, tokens, 1, rng, words)
            with gpu_gateway.client() as http:
                for texts in (batch, lone):
                    response = http.post("/infer", json={"model_name": "gpu/bert", "text": texts})
                    assert response.status_code == 200, response.text
                    assert response.headers["x-cached-inputs"] == "0"
                    served = np.asarray(response.json()["text_embeddings"])
                    worst = cosine_rows(served, reference_model_.encode(texts)).min()
                    checked.append((width, len(reference_model_.tokenizer(texts[0])["input_ids"]), len(texts),
                                    round(float(worst), 6)))
    assert min(worst for *_, worst in checked) >= HALF_THRESHOLD, checked
    assert len(checked) >= 8


def test_each_gpu_instance_reports_its_memory_graphs_included(gpu_gateway, dense):
    from prometheus_client.parser import text_string_to_metric_families

    listed, _ = dense
    with gpu_gateway.client() as http:
        text = http.get("/metrics/prometheus").text
        (now,) = [m for m in http.get("/loaded_models").json()["models"] if m["model_name"] == "gpu/bert"]
    samples = [
        sample
        for family in text_string_to_metric_families(text)
        if family.name == "embedgate_gpu_memory_bytes"
        for sample in family.samples
        if sample.labels.get("model") == listed["triton_name"]
    ]
    by_instance: dict[str, dict[str, float]] = {}
    for sample in samples:
        by_instance.setdefault(sample.labels["instance"], {})[sample.labels["part"]] = sample.value
    assert len(by_instance) == 2, samples
    for parts in by_instance.values():
        assert 0 < parts["weights"] < parts["total"]
    # The listing shows what the GPU says the model's stubs hold (nvidia-smi, asked here of
    # the processes whose command line names an instance of it): within 20%, and more than
    # its instances' allocators report (their CUDA contexts too).
    on_gpu = gpu_memory_of_stubs(gpu_gateway, listed["triton_name"])
    assert abs(now["gpu_memory_bytes"] - on_gpu) <= 0.2 * on_gpu, (now["gpu_memory_bytes"], on_gpu)
    assert now["gpu_memory_bytes"] > sum(parts["total"] for parts in by_instance.values())


def gpu_memory_of_stubs(gateway, triton_name: str) -> int:
    """What nvidia-smi says the stubs of this gateway's tritonserver that run ``triton_name``
    hold on the GPU, in bytes."""
    done = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True, check=True)
    used = {int(pid): int(mib) * 2**20 for pid, mib in (line.split(",") for line in done.stdout.splitlines())
            if mib.strip().isdigit()}
    stubs = model_stubs(gateway.children("tritonserver")[0], triton_name)
    assert stubs, f"no stub of {triton_name}"
    return sum(used.get(pid, 0) for pid in stubs)


def test_a_gpu_memory_budget_unloads_the_least_recently_used_idle_model(tmp_path_factory):
    """EMBEDGATE_GPU_MEMORY_BUDGET_MB holds two of three tiny models on GPU instances: a third
    load unloads the least recently used, and every answer is the library's."""
    from sentence_transformers import SentenceTransformer

    sources = tmp_path_factory.mktemp("gpu-budget-models")
    directories = {f"gpu/budget-{seed}": tiny_models.dense_model(sources / f"m{seed}", seed=seed) for seed in (1, 2, 3)}
    first, second, third = directories
    measured = start_gateway(tmp_path_factory.mktemp("gpu-budget-measure"), sources / "measure.log")
    try:
        with measured.client(timeout=600) as http:
            loaded = http.post("/load_sentence_transformer_model",
                               json={"model_name": first, "model_path": str(directories[first])})
            assert loaded.status_code == 200, loaded.text
            (listed,) = [m for m in http.get("/loaded_models").json()["models"] if m["model_name"] == first]
    finally:
        measured.stop()
    one = listed["gpu_memory_bytes"]
    assert one and one > 0, listed
    gateway = start_gateway(tmp_path_factory.mktemp("gpu-budget-repository"), sources / "gateway.log",
                            gpu_memory_budget_mb=f"{2.5 * one / 2**20:.0f}")
    try:
        with gateway.client(timeout=600) as http:
            for name in (first, second, first, third):  # the first used again: the second is the least recent
                loaded = http.post("/load_sentence_transformer_model",
                                   json={"model_name": name, "model_path": str(directories[name])})
                assert loaded.status_code == 200, loaded.text
                text = f"{name} on a budget"
                answer = http.post("/infer", json={"model_name": name, "text": [text]})
                assert answer.status_code == 200, answer.text
                library = SentenceTransformer(str(directories[name]), device="cpu")
                assert cosine_rows(answer.json()["text_embeddings"], library.encode([text]))[0] >= HALF_THRESHOLD
            assert {m["model_name"] for m in http.get("/loaded_models").json()["models"]} == {first, third}
        assert gateway.metric("embedgate_model_unloads_total", model=second, reason="budget") >= 1
    finally:
        gateway.stop()


def test_both_openclip_towers_serve_on_gpu_instances_at_parity(gpu_gateway, tiny_clip):
    import torch
    from PIL import Image

    model, preprocess, tokenizer = reference_model(tiny_clip)
    texts = ["a photo of a cat", "a diagram of a neural network", "two people riding bicycles"]
    blobs = []
    for seed in range(3):
        pixels = np.random.default_rng(seed).integers(0, 256, size=(50 + seed * 20, 70, 3), dtype=np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="PNG")
        blobs.append(buffer.getvalue())
    uris = ["data:image/png;base64," + base64.b64encode(blob).decode() for blob in blobs]
    clip = {"model_name": tiny_clip.model_name, "pretrained": str(tiny_clip.checkpoint)}

    with gpu_gateway.client() as http:
        loaded = http.post("/load_clip_model", json=clip)
        assert loaded.status_code == 200, loaded.text
        (listed,) = [m for m in http.get("/loaded_models").json()["models"] if m["model_name"] == tiny_clip.model_name]
        response = http.post("/infer", json={**clip, "text": texts, "image": uris})
        assert response.status_code == 200, response.text
    assert listed["gpu_dtype"] in ("float16", "float32")
    for part in ("text", "image"):
        config = parse((gpu_gateway.repository / f"{listed['triton_name']}_{part}_encoder" / "config.pbtxt").read_text())
        assert config.parameters["torch_file"].string_value == TORCH_FILE
    with torch.no_grad():
        text_reference = model.encode_text(tokenizer(texts)).numpy()
        image_reference = model.encode_image(
            torch.stack([preprocess(Image.open(io.BytesIO(blob))) for blob in blobs])
        ).numpy()
    body = response.json()
    assert cosine_rows(body["text_embeddings"], text_reference).min() >= HALF_THRESHOLD
    assert cosine_rows(body["image_embeddings"], image_reference).min() >= HALF_THRESHOLD
