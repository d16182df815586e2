"""What a load decides before it converts: a sentence-transformer converted before the server
published late-chunking graphs is converted again, as its kind says (once: a model that
cannot have one says why, and is not converted again for it); the conversion asks for the
graph only of a sentence-transformers model without a variant; a new model's instances are
GPU ones where the registry's backend serves on a GPU."""

from __future__ import annotations

from types import SimpleNamespace

from embedgate.api.compute.requests.kinds import kind_of
from embedgate.api.compute.scheduling.batching import BatchingPolicy
from embedgate.api.models.refs import ModelRef
from embedgate.api.models.registry import ModelRegistry
from embedgate.api.models.specs import conversion_spec
from embedgate.api.settings import Settings
from embedgate.contract.kinds.dense import DenseInfo, LateChunking
from embedgate.contract.metadata_parts import VariantInfo
from tests.api.conftest import fake_metadata


def test_a_model_converted_without_late_chunking_is_converted_again_where_the_server_publishes_it():
    """A sentence-transformer with neither the graph nor the reason it has none (its kind
    says; the load asks only where EMBEDGATE_LATE_CHUNKING is on)."""
    before = fake_metadata("org/m", kind="sentence_transformer")
    assert kind_of(before).converted_without_late_chunking()
    graph = DenseInfo(late_chunking=LateChunking(parity=before.parity))
    refused = DenseInfo(late_chunking_refusal="its pooling is 'cls'")
    assert not kind_of(fake_metadata("org/m", record=graph)).converted_without_late_chunking()
    assert not kind_of(fake_metadata("org/m", record=refused)).converted_without_late_chunking()
    assert not kind_of(fake_metadata("org/m", kind="cross_encoder")).converted_without_late_chunking()
    int8 = VariantInfo(name="int8", onnx_bytes=1)
    assert not kind_of(fake_metadata("org/m@int8", variant=int8)).converted_without_late_chunking()


def test_the_conversion_asks_for_the_graph_of_sentence_transformers_models_only(tmp_path):
    settings = Settings(late_chunking=True, repository_cache=tmp_path)

    def spec(ref: ModelRef):
        return conversion_spec(settings, str(tmp_path), BatchingPolicy(settings), ref)

    assert spec(ModelRef.named("org/m")).late_chunking
    assert not spec(ModelRef.named("org/m@int8")).late_chunking
    assert not spec(ModelRef.named("ViT-B-32", "laion2b_s34b_b79k")).late_chunking
    assert not conversion_spec(Settings(repository_cache=tmp_path), str(tmp_path), BatchingPolicy(settings),
                               ModelRef.named("org/m")).late_chunking


def test_a_new_model_gets_gpu_instances_where_the_registrys_backend_serves_on_a_gpu(tmp_path):
    """The registry's batching policy asks its backend (Triton's: this host's GPU and the
    PyTorch that would run it), not a module of its own."""
    for gpu, kind in ((True, "gpu"), (False, "cpu")):
        settings = Settings(model_repository=tmp_path / "repository", repository_cache=tmp_path)
        registry = ModelRegistry(settings, SimpleNamespace(has_gpu=lambda gpu=gpu: gpu))
        chosen = conversion_spec(settings, str(tmp_path), registry.batching, ModelRef.named("org/m")).triton
        assert chosen.instance_kind == kind


async def test_a_load_from_the_repository_never_converts(tmp_path, monkeypatch):
    """What a request's load asks (``from_repository``): a model the repository lacks is not
    found, never converted."""
    import pytest

    from embedgate.api.errors import ModelNotFound
    from embedgate.api.models import loading

    async def convert(*args, **kwargs):
        raise AssertionError("converted")

    monkeypatch.setattr(loading, "convert", convert)
    settings = Settings(model_repository=tmp_path / "repository", repository_cache=tmp_path)
    (tmp_path / "repository").mkdir()
    registry = ModelRegistry(settings, SimpleNamespace(has_gpu=lambda: False))
    with pytest.raises(ModelNotFound):
        await registry.load_sentence_transformer("org/m", from_repository=True)
    with pytest.raises(ModelNotFound):
        await registry.load_clip("ViT-B-32", "laion2b_s34b_b79k", from_repository=True)
