"""A SentenceTransformer with a Router converts as a Triton model whose versions are its
routes' graphs, each checked against encode with its own task, each route's tokenizer beside it."""

from __future__ import annotations

from embedgate.contract.spec import ModelMetadata
from embedgate.converters.triton_config import parse
from tests import tiny_models
from tests.converters.conftest import run_converter


def test_each_route_is_a_version_with_its_own_parity(tmp_path):
    model = tiny_models.routed_model(tmp_path / "model")
    run = run_converter({"model_name": "org/routed", "model_path": str(model), "triton_name": "org--routed",
                         "repository": str(tmp_path / "repository")})
    assert run.returncode == 0, run.stderr[-2000:]
    metadata = ModelMetadata.model_validate(run.last_line)
    assert [(route.name, route.tasks, route.version) for route in metadata.routes] == [
        ("document", ["default", "document"], 1), ("query", ["query"], 2)
    ]
    assert all(route.parity.passed and route.parity.min_cosine >= 0.9999 for route in metadata.routes)
    published = tmp_path / "repository" / "org--routed"
    assert list(parse((published / "config.pbtxt").read_text()).version_policy.specific.versions) == [1, 2]
    for version in ("1", "2"):
        assert {"model.onnx", "model.py", "batch_layout.py"} <= {path.name for path in (published / version).iterdir()}
    # The first route's tokenizer is the model's; the others' under routes/<index>/.
    assert (published / "tokenizer" / "tokenizer.json").is_file()
    assert (published / "routes" / "1" / "tokenizer" / "tokenizer.json").is_file()
    assert "route 'query' (query)" in run.stderr
