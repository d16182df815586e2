"""A directory is converted only by the converter of the kind it declares, or refused."""

from __future__ import annotations

import json

import pytest

from embedgate.converters.kinds import UnsupportedKind, check_convertible, model_files, read_declared
from tests import tiny_models

from .conftest import run_converter

ST = "sentence_transformers.base.modules.transformer.Transformer"
POOLING = "sentence_transformers.sentence_transformer.modules.pooling.Pooling"


def write(directory, **files):
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (directory / name.replace("__", ".")).write_text(json.dumps(content))
    return model_files(directory)


def modules(*types):
    return [{"idx": i, "name": str(i), "path": "", "type": t} for i, t in enumerate(types)]


@pytest.mark.parametrize("model_type", ["SentenceTransformer", "SparseEncoder", "CrossEncoder", "MultiVectorEncoder"])
def test_the_model_type_in_the_settings_file_decides(tmp_path, model_type):
    read = write(tmp_path, config_sentence_transformers__json={"model_type": model_type}, modules__json=modules(ST))
    assert read_declared(read).kind == model_type


def test_a_sequence_classification_model_without_modules_is_a_cross_encoder(tmp_path):
    read = write(tmp_path, config__json={"architectures": ["BertForSequenceClassification"]})
    assert read_declared(read).kind == "CrossEncoder"


def test_older_models_without_a_model_type_are_sentence_transformers(tmp_path):
    plain = write(tmp_path / "plain", config__json={"architectures": ["BertModel"]})
    assert read_declared(plain).kind == "SentenceTransformer"
    old = write(tmp_path / "old", config_sentence_transformers__json={"__version__": {}}, modules__json=modules(ST, POOLING))
    assert read_declared(old).kind == "SentenceTransformer"


def test_another_kind_is_refused_with_its_name(tmp_path):
    declared = read_declared(write(tmp_path, config_sentence_transformers__json={"model_type": "CrossEncoder"}))
    with pytest.raises(UnsupportedKind, match="a CrossEncoder .*config_sentence_transformers.json"):
        check_convertible(declared, expected="SentenceTransformer", trust_remote_code=False)


def test_custom_modules_need_trust_remote_code(tmp_path):
    declared = read_declared(write(tmp_path, modules__json=modules(ST, "my_package.SecretPooling")))
    with pytest.raises(UnsupportedKind, match="my_package.SecretPooling.*trust_remote_code"):
        check_convertible(declared, expected="SentenceTransformer", trust_remote_code=False)
    check_convertible(declared, expected="SentenceTransformer", trust_remote_code=True)


def test_malformed_files_are_conversion_errors(tmp_path):
    (tmp_path / "modules.json").write_text("{not json")
    with pytest.raises(Exception, match="modules.json is not valid JSON"):
        read_declared(model_files(tmp_path))


@pytest.mark.parametrize(
    ("build", "named"),
    [(tiny_models.cross_encoder, "CrossEncoder"), (tiny_models.legacy_cross_encoder, "CrossEncoder"),
     (tiny_models.sparse_encoder, "SparseEncoder")],
)
def test_cross_and_sparse_encoders_are_never_served_as_dense_models(tmp_path, build, named):
    model = build(tmp_path / "model")
    repository = tmp_path / "repository"
    run = run_converter(
        {"model_name": "org/model", "model_path": str(model), "triton_name": "org--model", "repository": str(repository)}
    )
    assert run.returncode == 1, run.stderr[-2000:]
    assert named in run.last_line["error"]
    assert not (repository / "org--model").exists()


def test_a_tiny_dense_model_still_converts(tmp_path):
    model = tiny_models.dense_model(tmp_path / "model")
    run = run_converter(
        {"model_name": "org/model", "model_path": str(model), "triton_name": "org--model", "repository": str(tmp_path / "r")}
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.last_line["parity"]["min_cosine"] >= 0.9999
