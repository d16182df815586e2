"""/loaded_models shows what a model's GPU instances hold on the GPU, read from the gauges
they set in Triton's metrics; CPU models cost no scrape."""

from __future__ import annotations

from types import SimpleNamespace

from embedgate.api.telemetry import scrape
from embedgate.contract.spec import GpuInfo, ParityResult

GPU = GpuInfo(
    dtype="float16", device="NVIDIA H200", torch_version="2.11", torch_bytes=1,
    parity=ParityResult(passed=True, threshold=0.999, min_cosine=0.9999, sentences=12),
)
TRITON_TEXT = (
    b'embedgate_gpu_memory_bytes{instance="org--gpu_0_0",model="org--gpu",part="total"} 800\n'
    b'embedgate_gpu_memory_bytes{instance="org--gpu_0_0",model="org--gpu",part="weights"} 40\n'
    b'embedgate_gpu_memory_bytes{instance="org--gpu_0_1",model="org--gpu",part="total"} 800\n'
)


def test_a_gpu_models_listing_shows_its_instances_memory(client, gateway, monkeypatch):
    asked = []

    async def fetch(url):
        asked.append(url)
        return TRITON_TEXT

    monkeypatch.setattr(scrape, "fetch_triton_metrics", fetch)
    gateway.triton = SimpleNamespace(metrics_url="http://127.0.0.1:8002/metrics")
    gateway.registry.loaded_names = {"org/gpu", "org/cpu"}
    gateway.registry.changes = {"org/gpu": {"gpu": GPU}}

    listed = {m["model_name"]: m for m in client.get("/loaded_models").json()["models"]}

    assert listed["org/gpu"]["gpu_memory_bytes"] == 1600
    assert listed["org/cpu"]["gpu_memory_bytes"] is None
    assert asked == ["http://127.0.0.1:8002/metrics"]


def test_without_gpu_models_triton_is_not_asked(client, gateway, monkeypatch):
    async def fetch(url):
        raise AssertionError("no scrape for CPU models")

    monkeypatch.setattr(scrape, "fetch_triton_metrics", fetch)
    (listed,) = client.get("/loaded_models").json()["models"]
    assert listed["gpu_memory_bytes"] is None
