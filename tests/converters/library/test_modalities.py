"""Which modalities a directory's Transformer takes, read from its files as
sentence-transformers reads them, and which converter that sends it to."""

from __future__ import annotations

import json

import pytest

from embedgate.contract.errors import UnsupportedModelError
from embedgate.contract.spec import ConversionSpec
from embedgate.converters.kinds import converter_for
from embedgate.converters.library.declared import model_files, read_declared
from embedgate.converters.library.modalities import modalities_of, takes_media

ST = "sentence_transformers.base.modules.transformer.Transformer"
LEGACY_CLIP = "sentence_transformers.models.CLIPModel"
CLIP_FORM = {
    "text": {"method": "get_text_features", "method_output_name": "pooler_output"},
    "image": {"method": "get_image_features", "method_output_name": "pooler_output"},
}


def directory(tmp_path, first_type=ST, folder="", config=None, model_type="SentenceTransformer"):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "modules.json").write_text(json.dumps([{"idx": 0, "name": "0", "path": folder, "type": first_type}]))
    (tmp_path / "config_sentence_transformers.json").write_text(json.dumps({"model_type": model_type}))
    if config is not None:
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "sentence_bert_config.json").write_text(json.dumps(config))
    return tmp_path


def test_the_first_modules_modality_config_names_them(tmp_path):
    found = read_declared(model_files(directory(tmp_path, config={"modality_config": CLIP_FORM})))
    assert found.modalities == ("text", "image") and takes_media(found.modalities)


def test_a_module_in_a_folder_is_read_there(tmp_path):
    config = {"modality_config": {**CLIP_FORM, "image+text": CLIP_FORM["text"]}}
    found = read_declared(model_files(directory(tmp_path, folder="0_Transformer", config=config)))
    assert found.modalities == ("text", "image", "image+text")


def test_a_transformer_saved_without_modalities_is_text_only(tmp_path):
    found = read_declared(model_files(directory(tmp_path, config={"max_seq_length": 128})))
    assert found.modalities == ("text",) and not takes_media(found.modalities)


def test_the_deprecated_clip_module_takes_images(tmp_path):
    assert modalities_of(model_files(directory(tmp_path, first_type=LEGACY_CLIP)), {"type": LEGACY_CLIP}) == (
        "text", "image",
    )


def test_a_plain_directory_and_a_chat_template_are_text():
    assert modalities_of(lambda name: None, None) == ("text",)
    assert not takes_media(("text", "message"))
    assert takes_media(("message", "video"))


@pytest.mark.parametrize("model_type", ["CrossEncoder", "SparseEncoder"])
def test_a_class_without_a_multimodal_kind_that_takes_images_is_refused(tmp_path, model_type):
    path = directory(tmp_path, config={"modality_config": CLIP_FORM}, model_type=model_type)
    spec = ConversionSpec(model_name="m", model_path=str(path), triton_name="m", repository=str(tmp_path / "repo"))
    with pytest.raises(UnsupportedModelError) as refused:
        converter_for(spec, print)
    assert f"a {model_type} whose Transformer takes text, image" in str(refused.value)
    assert "SentenceTransformer models only" in str(refused.value)


def test_a_sentence_transformer_that_takes_images_goes_to_the_multimodal_converter(tmp_path):
    path = directory(tmp_path, config={"modality_config": CLIP_FORM})
    spec = ConversionSpec(model_name="m", model_path=str(path), triton_name="m", repository=str(tmp_path / "repo"))
    assert converter_for(spec, print).kind.name == "multimodal"
    text_only = directory(tmp_path / "text", config={})
    spec = spec.model_copy(update={"model_path": str(text_only)})
    assert converter_for(spec, print).kind.name == "sentence_transformer"
