"""Publishing a CLIP model's two parts, with a fake converter in place of torch (fast)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from tests.helpers import python_path

REPO_ROOT = Path(__file__).resolve().parents[2]
FAKE_CLIP_CONVERTER = textwrap.dedent(
    """
    from embedgate.contract.kinds.clip import ClipMetadata, ClipText, ImagePreprocessing
    from embedgate.contract.spec import ImageParityResult, ModelMetadata, ParityResult
    from tests.converters.fake_kinds import tiny_onnx

    def convert(spec, text_dir, image_dir, step):
        step("fake clip conversion")
        if spec.model_name == "race":
            # Someone else publishes the text part while this conversion runs.
            (text_dir.parent.parent / (spec.triton_name + "_text_encoder")).mkdir()
        for directory, inputs in ((text_dir, ("input_ids",)), (image_dir, ("pixels",))):
            (directory / "1").mkdir()
            tiny_onnx(directory / "1" / "model.onnx", inputs)
        (text_dir / "tokenizer").mkdir()
        (text_dir / "tokenizer" / "tokenizer.json").write_text("{}")
        parity = dict(passed=True, threshold=0.9999, min_cosine=1.0)
        return ModelMetadata(
            kind="clip", model_name=spec.model_name, triton_name=spec.triton_name, source="fake",
            library="fake", library_version="0", embedding_dim=16, max_seq_length=77, normalized=False,
            form=spec.triton.form, max_batch_size=spec.triton.max_batch_size,
            parity=ParityResult(sentences=1, **parity), created_at="2024-01-01T00:00:00+00:00",
            conversion_seconds=0.0,
            record=ClipMetadata(
                pretrained=spec.pretrained,
                text=ClipText(context_length=77, sot_token_id=1, eot_token_id=2, word_pattern="\\\\w+"),
                image=ImagePreprocessing(height=224, width=196, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)),
                image_parity=ImageParityResult(images=1, **parity),
            ),
        )
    """
)
RUNNER = textwrap.dedent(
    """
    import sys
    import embedgate.converters.__main__ as entry
    from tests.converters.fake_kinds import install
    install(open_clip="fake_clip_converter")
    sys.exit(entry.main())
    """
)


def convert(tmp_path: Path, repository: Path, **overrides) -> tuple[int, dict]:
    (tmp_path / "fake_clip_converter.py").write_text(FAKE_CLIP_CONVERTER)
    (tmp_path / "runner.py").write_text(RUNNER)
    spec = {
        "library": "open_clip", "model_name": "ViT-X", "pretrained": "tag", "triton_name": "ViT-X_tag",
        "repository": str(repository), **overrides,
    }
    env = dict(os.environ, PYTHONPATH=python_path(REPO_ROOT, tmp_path))
    done = subprocess.run(
        [sys.executable, str(tmp_path / "runner.py")], input=json.dumps(spec), capture_output=True, text=True, env=env, timeout=60
    )
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1])


def config(directory: Path) -> pb.ModelConfig:
    return text_format.Parse((directory / "config.pbtxt").read_text(), pb.ModelConfig())


def test_two_parts_with_their_own_configs(tmp_path):
    repository = tmp_path / "repo"
    code, metadata = convert(tmp_path, repository)
    assert code == 0, metadata
    assert sorted(p.name for p in repository.iterdir()) == ["ViT-X_tag_image_encoder", "ViT-X_tag_text_encoder"]
    text, image = config(repository / "ViT-X_tag_text_encoder"), config(repository / "ViT-X_tag_image_encoder")
    assert [(i.name, list(i.dims)) for i in text.input] == [("input_ids", [77])]
    assert [(i.name, list(i.dims)) for i in image.input] == [("pixels", [224, 196, 3])]
    for part in repository.iterdir():
        assert json.loads((part / "metadata.json").read_text()) == metadata


def test_onnxruntime_form_for_both_parts(tmp_path):
    repository = tmp_path / "repo"
    code, _ = convert(tmp_path, repository, triton={"form": "onnxruntime", "instance_kind": "gpu"})
    assert code == 0
    for part in repository.iterdir():
        assert config(part).platform == "onnxruntime_onnx" and not (part / "1" / "model.py").exists()


def test_a_text_part_in_the_way_publishes_nothing(tmp_path):
    repository = tmp_path / "repo"
    (repository / "ViT-X_tag_text_encoder").mkdir(parents=True)
    code, answer = convert(tmp_path, repository)
    assert code == 4 and "already exists" in answer["error"]
    assert sorted(p.name for p in repository.iterdir()) == ["ViT-X_tag_text_encoder"]


def test_a_failed_text_publish_takes_the_image_part_back(tmp_path):
    repository = tmp_path / "repo"
    code, answer = convert(tmp_path, repository, model_name="race", triton_name="race_tag")
    assert code == 4 and "already exists" in answer["error"]
    assert [p.name for p in repository.iterdir()] == ["race_tag_text_encoder"]


@pytest.mark.parametrize("leftover", ["ViT-X_tag_image_encoder", "ViT-X_tag_text_encoder"])
def test_replace_completes_an_interrupted_publish(tmp_path, leftover):
    repository = tmp_path / "repo"
    (repository / leftover).mkdir(parents=True)
    code, _ = convert(tmp_path, repository, replace=True)
    assert code == 0
    assert all((part / "metadata.json").is_file() for part in repository.iterdir())
    assert len(list(repository.iterdir())) == 2
