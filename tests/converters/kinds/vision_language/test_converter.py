"""``python -m converters`` on tiny vision-language sentence-transformers (random weights,
built at test time): the Qwen2-VL form published as a language graph and a vision graph
that Triton runs a request at a time, their parity (texts one past the max length, with a
prompt and without; the parity images) recorded; the Qwen2.5-VL form with its windows and
the Qwen3-VL form with its position grid and deepstack rows; a module after the Transformer
that the graph does not run refused, saying why."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from embedgate.contract.kinds.vision_language import VisionLanguageMetadata, vision_language_part_names
from embedgate.contract.spec import ModelMetadata
from embedgate.converters.library.image_parity import parity_images
from tests.multimodal_models import vision_language_model

BASE = "tiny-vl"


def spec(path, repository) -> dict:
    return {"model_name": "org/tiny-vl", "model_path": str(path), "triton_name": BASE, "repository": str(repository)}


def config_of(part) -> pb.ModelConfig:
    return text_format.Parse((part / "config.pbtxt").read_text(), pb.ModelConfig())


@pytest.fixture(scope="module")
def converted(run_conversion, tmp_path_factory):
    path = vision_language_model(tmp_path_factory.mktemp("vl") / "model", seed=3)
    run = run_conversion(spec(path, tmp_path_factory.mktemp("model_repository")))
    assert run.returncode == 0, run.stderr[-3000:]
    return run


def test_both_graphs_are_published_with_one_metadata(converted):
    language_dir, vision_dir = (converted.repository / part for part in vision_language_part_names(BASE))
    metadata = ModelMetadata.model_validate(converted.last_line)
    for part in (language_dir, vision_dir):
        assert ModelMetadata.model_validate_json((part / "metadata.json").read_text()) == metadata
        assert (part / "1" / "model.onnx").is_file() and (part / "1" / "model.py").is_file()
    assert (language_dir / "tokenizer" / "tokenizer.json").is_file()
    assert metadata.kind == "vision_language" and not metadata.dynamic_batching
    # No max length named: the one its position embeddings imply; the parity texts pass it.
    assert metadata.max_seq_length == 256 and metadata.parity.passed and metadata.parity.min_cosine >= 0.9999
    record = metadata.record_of(VisionLanguageMetadata)
    assert record is not None and record.image_parity.passed and record.image_parity.images == len(parity_images())
    assert record.pixel_max_error < 1e-5 and record.image_hidden == 32
    assert record.template.text.before == "<|im_start|>user\n" and record.template.suffix_ids
    # Its template writes an input's parts one after another: a text and an image together, checked.
    assert record.template.parts_joined and "text and image inputs: min cosine 1.000000" in converted.stderr


def test_triton_runs_each_request_of_either_graph_alone(converted):
    language_dir, vision_dir = (converted.repository / part for part in vision_language_part_names(BASE))
    configs = [config_of(part) for part in (language_dir, vision_dir)]
    for config in configs:
        assert config.max_batch_size == 0 and not config.HasField("dynamic_batching") and config.backend == "python"
    language, vision = ({tensor.name: list(tensor.dims) for tensor in config.input} for config in configs)
    assert language == {"input_ids": [-1, -1], "attention_mask": [-1, -1], "position_ids": [3, -1, -1],
                        "image_embeds": [1, -1, 32]}
    assert vision == {"patches": [-1, 3 * 14 * 14], "position_ids": [-1, 2]}
    assert [list(output.dims) for output in configs[1].output] == [[1, -1, 32]]


def test_the_qwen3_vl_form_is_published_with_its_position_grid_and_deepstack_rows(run_conversion, tmp_path):
    path = vision_language_model(tmp_path / "qwen3-vl", seed=4, architecture="qwen3_vl")
    run = run_conversion(spec(path, tmp_path / "repository"))
    assert run.returncode == 0, run.stderr[-3000:]
    metadata = ModelMetadata.model_validate(run.last_line)
    record = metadata.record_of(VisionLanguageMetadata)
    assert record is not None and (record.image_levels, record.position_grid, record.images.patch_size) == (2, 4, 16)
    assert metadata.parity.min_cosine >= 0.9999 and record.image_parity.min_cosine >= 0.9999
    vision = config_of(tmp_path / "repository" / f"{BASE}---image")
    assert [tensor.name for tensor in vision.input] == ["patches", "position_ids", "interp_indices", "interp_weights"]
    assert [list(output.dims) for output in vision.output] == [[2, -1, 32]]


def test_the_qwen2_5_vl_form_is_published_with_its_windows(run_conversion, tmp_path):
    path = vision_language_model(tmp_path / "qwen2.5-vl", seed=6, architecture="qwen2_5_vl")
    run = run_conversion(spec(path, tmp_path / "repository"))
    assert run.returncode == 0, run.stderr[-3000:]
    record = ModelMetadata.model_validate(run.last_line).record_of(VisionLanguageMetadata)
    assert record is not None and record.window_size == 56 and record.image_parity.min_cosine >= 0.9999
    vision = config_of(tmp_path / "repository" / f"{BASE}---image")
    assert [tensor.name for tensor in vision.input] == ["patches", "position_ids", "window_ids"]


def test_a_module_the_graph_cannot_follow_with_is_refused_saying_why(run_conversion, tmp_path):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import LayerNorm

    model = SentenceTransformer(str(vision_language_model(tmp_path / "vl", seed=7)), device="cpu")
    model.append(LayerNorm(32))
    model.save(str(tmp_path / "with-layer-norm"))
    run = run_conversion(spec(tmp_path / "with-layer-norm", tmp_path / "repository"))
    assert run.returncode == 8, run.stderr[-3000:]
    error = run.last_line["error"]
    assert error.startswith(
        "unsupported vision-language sentence-transformer: a LayerNorm module follows its Transformer"
    )
    assert not (tmp_path / "repository" / BASE).exists()
