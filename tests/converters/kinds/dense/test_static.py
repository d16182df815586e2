"""A static embedding model converts to no Triton model: its tokenizer and vectors saved for
the gateway, checked with the gateway's own computation against ``encode``."""

from __future__ import annotations

import numpy as np
import pytest

from embedgate.contract.spec import ModelMetadata
from embedgate.converters.kinds.dense.static import NO_LIMIT, refusal
from embedgate.converters.library.routes import ModuleRoute
from tests import static_models
from tests.converters.conftest import run_converter


def _convert(tmp_path, **options):
    model = static_models.static_model(tmp_path / "model", **options)
    return model, run_converter({"model_name": "org/static", "model_path": str(model), "triton_name": "org--static",
                                 "repository": str(tmp_path / "repository")})


def test_its_vectors_and_tokenizer_are_published_for_the_gateway_with_no_triton_model(tmp_path):
    from sentence_transformers import SentenceTransformer

    model, run = _convert(tmp_path, dim=12)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "no Triton model: the gateway computes it" in run.stderr
    metadata = ModelMetadata.model_validate(run.last_line)
    (route,) = metadata.routes
    assert (route.name, route.tasks, route.version) == ("", ["default", "query", "document"], None)
    assert (route.add_special_tokens, route.normalized, route.max_seq_length) == (False, True, NO_LIMIT)
    assert route.parity.passed and route.parity.max_abs_error < 1e-5
    assert (metadata.embedding_dim, metadata.normalized, metadata.max_seq_length) == (12, True, NO_LIMIT)
    assert (metadata.packed_parity, metadata.variant, metadata.gpu) == (None, None, None)
    assert metadata.calibration is not None
    published = tmp_path / "repository" / "org--static"
    assert sorted(str(p.relative_to(published)) for p in published.rglob("*") if p.is_file()) == [
        "metadata.json", "tokenizer/tokenizer.json", "weights.npy"
    ]
    library = SentenceTransformer(str(model), device="cpu")
    np.testing.assert_array_equal(np.load(published / "weights.npy"), library[0].embedding.weight.detach().numpy())


def test_a_tokenizer_that_cuts_texts_cuts_them_in_the_gateway_too(tmp_path):
    _, run = _convert(tmp_path, max_length=16, normalize=False)
    assert run.returncode == 0, run.stderr[-2000:]
    (route,) = ModelMetadata.model_validate(run.last_line).routes
    # The parity sentences hold one past 16 tokens, checked against the library's cut.
    assert (route.max_seq_length, route.normalized) == (16, False)


def test_a_variant_of_a_static_model_is_refused(tmp_path):
    model = static_models.static_model(tmp_path / "model")
    run = run_converter({"model_name": "org/static", "model_path": str(model), "triton_name": "org--static--int8",
                         "repository": str(tmp_path / "repository"), "variant": "int8"})
    assert run.returncode == 8
    assert "static embeddings, computed by the gateway with no graph to vary" in run.last_line["error"]


class _Tokenizer:
    def __init__(self, truncation=None):
        self.truncation = truncation


class StaticEmbedding:
    tokenizer = _Tokenizer()


class Normalize:
    pass


class Dense:
    pass


@pytest.mark.parametrize(
    "modules, reason",
    [
        ((StaticEmbedding(),), None),
        ((StaticEmbedding(), Normalize()), None),
        ((StaticEmbedding(), Dense(), Normalize()), "StaticEmbedding -> Dense -> Normalize; embedgate computes"),
    ],
)
def test_a_static_embedding_is_computed_alone_or_then_normalized(modules, reason):
    found = refusal(ModuleRoute("", ("default",), modules))
    assert found is None if reason is None else reason in found


def test_a_tokenizer_that_cuts_texts_from_the_left_is_refused():
    module = StaticEmbedding()
    module.tokenizer = _Tokenizer({"max_length": 8, "direction": "left"})
    assert "cuts texts from the left" in refusal(ModuleRoute("", ("default",), (module,)))
