"""The copy of a benchmark model written for a peer on sentence-transformers 3: the module
classes and config keys version 3 reads, the same weights and tokenizer."""

from __future__ import annotations

import json

import pytest

from embedgate.bench import peer_layout


def _model(path, modules, pooling="mean"):
    path.mkdir()
    (path / "modules.json").write_text(json.dumps([
        {"idx": i, "name": str(i), "path": "" if i == 0 else f"{i}_{kind}", "type": f"sentence_transformers.base.modules.{kind.lower()}.{kind}"}
        for i, kind in enumerate(modules)
    ]))
    for i, kind in enumerate(modules[1:], 1):
        (path / f"{i}_{kind}").mkdir()
    (path / "1_Pooling" / "config.json").write_text(json.dumps({"embedding_dimension": 384, "pooling_mode": pooling, "include_prompt": True}))
    (path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 256, "max_length": 128}))
    (path / "config_sentence_transformers.json").write_text("{}")
    (path / "model.safetensors").write_bytes(b"weights")
    return path


def test_a_mean_pooled_normalized_model_is_written_as_version_3_reads_it(tmp_path):
    out = peer_layout.write(_model(tmp_path / "model", ["Transformer", "Pooling", "Normalize"]), tmp_path / "v3")

    assert [m["type"] for m in json.loads((out / "modules.json").read_text())] == [
        "sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling",
        "sentence_transformers.models.Normalize",
    ]
    assert json.loads((out / "1_Pooling" / "config.json").read_text()) == {
        "word_embedding_dimension": 384, "pooling_mode_mean_tokens": True,
    }
    assert json.loads((out / "sentence_bert_config.json").read_text()) == {"max_seq_length": 256, "do_lower_case": False}
    assert (out / "model.safetensors").read_bytes() == b"weights"
    assert not (out / "config_sentence_transformers.json").exists()


def test_cls_pooling_keeps_its_mode(tmp_path):
    out = peer_layout.write(_model(tmp_path / "model", ["Transformer", "Pooling"], pooling="cls"), tmp_path / "v3")

    assert json.loads((out / "1_Pooling" / "config.json").read_text())["pooling_mode_cls_token"] is True


@pytest.mark.parametrize(("modules", "pooling"), [(["Transformer", "Pooling", "Dense"], "mean"), (["Transformer", "Pooling"], "lasttoken")])
def test_a_stack_it_cannot_write_exactly_is_refused(tmp_path, modules, pooling):
    with pytest.raises(SystemExit):
        peer_layout.write(_model(tmp_path / "model", modules, pooling), tmp_path / "v3")
