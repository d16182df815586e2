"""A directory is converted only by the converter of the kind it declares, or refused."""

from __future__ import annotations

import json

import pytest

from embedgate.contract.errors import ConversionError, RemoteCodeRefused, UnsupportedModelError
from embedgate.converters.library.declared import (
    check_custom_modules,
    check_modeling_code,
    model_files,
    read_declared,
    unsupported,
)
from tests import tiny_models
from tests.converters.conftest import run_converter

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


def test_a_kind_nobody_serves_is_refused_with_its_name_and_where_it_was_read(tmp_path):
    found = read_declared(write(tmp_path, config_sentence_transformers__json={"model_type": "MultiVectorEncoder"}))
    error = unsupported(found, ("SentenceTransformer", "CrossEncoder"))
    assert isinstance(error, UnsupportedModelError) and error.exit_code == 8
    assert "a MultiVectorEncoder (per config_sentence_transformers.json)" in str(error)
    assert "SentenceTransformer, CrossEncoder" in str(error)


def test_custom_modules_need_trust_remote_code(tmp_path):
    found = read_declared(write(tmp_path, modules__json=modules(ST, "my_package.SecretPooling")))
    with pytest.raises(RemoteCodeRefused, match="my_package.SecretPooling.*trust_remote_code") as refused:
        check_custom_modules(found, trust_remote_code=False)
    # Not something that cannot be served: something the request did not allow (a 403).
    assert refused.value.exit_code == 9
    check_custom_modules(found, trust_remote_code=True)


def test_an_architecture_of_the_models_own_needs_trust_remote_code(tmp_path):
    auto_map = {"AutoConfig": "jinaai/jina-bert-implementation--configuration_bert.JinaBertConfig",
                "AutoModel": "jinaai/jina-bert-implementation--modeling_bert.JinaBertModel"}
    own = write(tmp_path / "own", config__json={"model_type": "jina_bert", "auto_map": auto_map})
    with pytest.raises(RemoteCodeRefused, match=r"\(jina_bert\) is code of its own \(configuration_bert.py, "
                                                 r"modeling_bert.py\).*trust_remote_code"):
        check_modeling_code(own, trust_remote_code=False)
    check_modeling_code(own, trust_remote_code=True)
    # An auto_map beside a type transformers has: its own class loads, as the library loads it.
    known = write(tmp_path / "known", config__json={"model_type": "bert", "auto_map": auto_map})
    check_modeling_code(known, trust_remote_code=False)
    check_modeling_code(write(tmp_path / "plain", config__json={"model_type": "bert"}), trust_remote_code=False)


def test_malformed_files_are_conversion_errors(tmp_path):
    (tmp_path / "modules.json").write_text("{not json")
    with pytest.raises(ConversionError, match="modules.json is not valid JSON"):
        read_declared(model_files(tmp_path))


def spec_for(model, repository, **extra) -> dict:
    return {"model_name": "org/model", "model_path": str(model), "triton_name": "org--model",
            "repository": str(repository), **extra}


def test_a_model_type_no_converter_serves_is_refused_and_nothing_is_published(tmp_path):
    model = tiny_models.dense_model(tmp_path / "model")
    settings = json.loads((model / "config_sentence_transformers.json").read_text())
    (model / "config_sentence_transformers.json").write_text(json.dumps({**settings, "model_type": "HologramEncoder"}))
    run = run_converter(spec_for(model, tmp_path / "repository"))
    assert run.returncode == 8, run.stderr[-2000:]
    assert "unknown model_type 'HologramEncoder'" in run.last_line["error"]
    assert "MultiVectorEncoder" in run.last_line["error"]  # among those it serves
    assert not (tmp_path / "repository" / "org--model").exists()


def test_a_variant_of_a_cross_encoder_is_refused(tmp_path):
    model = tiny_models.cross_encoder(tmp_path / "model")
    run = run_converter(spec_for(model, tmp_path / "repository", triton_name="org--model---int8", variant="int8"))
    assert run.returncode == 8, run.stderr[-2000:]
    assert "CrossEncoder" in run.last_line["error"] and "variants" in run.last_line["error"]
    assert not (tmp_path / "repository" / "org--model---int8").exists()


def test_a_variant_of_a_routed_model_is_refused_naming_why(tmp_path):
    # A variant is one graph; a routed model is a graph per route.
    model = tiny_models.routed_model(tmp_path / "model")
    run = run_converter(spec_for(model, tmp_path / "repository", triton_name="org--model---int8", variant="int8"))
    assert run.returncode == 8, run.stderr[-2000:]
    assert "Router" in run.last_line["error"] and "'@int8'" in run.last_line["error"], run.last_line
    assert not (tmp_path / "repository" / "org--model---int8").exists()
