"""An inference-free sparse model: its document route a SPLADE graph, its query route's
static weights and tokenizer saved for the gateway and checked with the gateway's own code."""

from __future__ import annotations

import numpy as np

from embedgate.contract.kinds.sparse import SparseInfo
from embedgate.contract.spec import ModelMetadata
from embedgate.converters.kinds.sparse.static import refusal
from embedgate.converters.library.routes import ModuleRoute
from embedgate.converters.triton_config import parse
from tests import tiny_models
from tests.converters.conftest import run_converter


def test_the_query_route_is_stored_for_the_gateway_and_the_document_route_is_a_graph(tmp_path):
    model = tiny_models.inference_free_splade(tmp_path / "model", max_active_dims=30)
    run = run_converter({"model_name": "org/free", "model_path": str(model), "triton_name": "org--free",
                         "repository": str(tmp_path / "repository")})
    assert run.returncode == 0, run.stderr[-2000:]
    metadata = ModelMetadata.model_validate(run.last_line)
    document, query = metadata.routes
    assert (document.name, document.version, document.add_special_tokens) == ("document", 1, True)
    assert (query.name, query.tasks, query.version, query.add_special_tokens) == ("query", ["query"], None, False)
    assert query.parity.passed and query.parity.max_abs_error < 1e-6
    assert metadata.record_of(SparseInfo).max_active_dims == 30 and metadata.embedding_dim == 74
    published = tmp_path / "repository" / "org--free"
    weights = np.load(published / "routes" / "1" / "weights.npy")
    assert weights.shape == (74,) and (weights == 0).any() and weights.max() > 1
    assert not parse((published / "config.pbtxt").read_text()).HasField("version_policy")  # one graph: version 1


class SparseStaticEmbedding:
    class tokenizer:  # noqa: N801
        is_fast = True


class SpladePooling:
    pass


def test_static_weights_are_computed_by_the_gateway_only_alone():
    assert refusal(ModuleRoute("query", ("query",), (SparseStaticEmbedding(),))) is None
    reason = refusal(ModuleRoute("query", ("query",), (SparseStaticEmbedding(), SpladePooling())))
    assert "SparseStaticEmbedding -> SpladePooling" in reason
