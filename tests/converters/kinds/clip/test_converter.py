"""``python -m converters`` on a small OpenCLIP model (random weights, built at test time):
two towers published together, each reproducing open_clip, and clear failures."""

from __future__ import annotations

import json

import numpy as np
import pytest
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as pb

from embedgate.contract.kinds.clip import ClipMetadata, HFClipText
from embedgate.contract.preprocess.clip_text import ClipTokenizer, clip_tokenizer
from embedgate.contract.preprocess.images import prepare_image
from embedgate.contract.spec import EMBEDDING, INPUT_IDS, PIXELS, ModelMetadata, clip_part_names
from embedgate.converters.kinds.clip.parity import parity_images
from tests.clip_model import TINY_CLIP_CONFIG, build_tiny_clip, build_tiny_siglip, reference_model
from tests.helpers import cosine_rows

BASE = "tiny_clip"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_clip(tmp_path_factory.mktemp("tiny-clip"))


def clip_spec(tiny, repository, **overrides) -> dict:
    return {
        "library": "open_clip",
        "model_name": tiny.model_name,
        "pretrained": str(tiny.checkpoint),
        "clip_model_config_dir": str(tiny.config_dir),
        "triton_name": BASE,
        "repository": str(repository),
        **overrides,
    }


@pytest.fixture(scope="module")
def converted(tiny, run_conversion, tmp_path_factory):
    run = run_conversion(clip_spec(tiny, tmp_path_factory.mktemp("model_repository")))
    assert run.returncode == 0, run.stderr[-3000:]
    return run


@pytest.fixture(scope="module")
def reference(tiny):
    return reference_model(tiny)


def test_both_towers_are_published_with_one_metadata(converted):
    text_dir, image_dir = (converted.repository / part for part in clip_part_names(BASE))
    assert sorted(p.name for p in converted.repository.iterdir()) == sorted([text_dir.name, image_dir.name])
    metadata = ModelMetadata.model_validate(converted.last_line)
    for part in (text_dir, image_dir):
        assert ModelMetadata.model_validate_json((part / "metadata.json").read_text()) == metadata
        assert (part / "1" / "model.onnx").is_file() and (part / "1" / "model.py").is_file()
    assert (text_dir / "tokenizer" / "tokenizer.json").is_file()
    assert not (image_dir / "tokenizer").exists()
    assert metadata.kind == "clip" and metadata.embedding_dim == 32 and metadata.max_seq_length == 24
    clip = metadata.record_of(ClipMetadata)
    assert (clip.image.height, clip.image.width, clip.image.resize_mode) == (48, 64, "shortest")
    assert clip.text.context_length == 24 and clip.text.eot_token_id == 49407
    assert metadata.parity.min_cosine >= 0.9999 and clip.image_parity.min_cosine >= 0.9999
    assert clip.image_parity.images == len(parity_images())


def test_configs_declare_each_towers_inputs(converted):
    text_name, image_name = clip_part_names(BASE)
    text = text_format.Parse((converted.repository / text_name / "config.pbtxt").read_text(), pb.ModelConfig())
    image = text_format.Parse((converted.repository / image_name / "config.pbtxt").read_text(), pb.ModelConfig())
    assert (text.name, image.name) == (text_name, image_name)
    assert [(i.name, i.data_type, list(i.dims)) for i in text.input] == [(INPUT_IDS, pb.TYPE_INT64, [24])]
    assert [(i.name, i.data_type, list(i.dims)) for i in image.input] == [(PIXELS, pb.TYPE_UINT8, [48, 64, 3])]
    for config in (text, image):
        assert [(o.name, list(o.dims)) for o in config.output] == [(EMBEDDING, [32])]
        assert config.backend == "python" and config.HasField("dynamic_batching")


def onnx_session(converted, part: int, base: str = BASE):
    import onnxruntime as ort

    path = converted.repository / clip_part_names(base)[part] / "1" / "model.onnx"
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_text_tower_matches_encode_text_on_new_texts(converted, reference):
    import torch

    model, _, tokenizer = reference
    metadata = ModelMetadata.model_validate(converted.last_line)
    texts = ["a diagram", "a dog playing in the snow " * 12, "Ünïcödé ☃", ""]
    ids = ClipTokenizer(
        converted.repository / clip_part_names(BASE)[0] / "tokenizer" / "tokenizer.json", metadata.record_of(ClipMetadata).text
    ).encode(texts).input_ids
    np.testing.assert_array_equal(ids, tokenizer(texts).numpy())
    with torch.no_grad():
        expected = model.encode_text(tokenizer(texts)).numpy()
    (served,) = onnx_session(converted, 0).run([EMBEDDING], {INPUT_IDS: ids})
    assert cosine_rows(served, expected).min() >= 0.9999


def test_image_tower_matches_encode_image_through_the_gateways_preprocessing(converted, reference):
    import io

    import torch
    from PIL import Image

    model, preprocess, _ = reference
    metadata = ModelMetadata.model_validate(converted.last_line)
    rng = np.random.default_rng(7)
    images = []
    for width, height in ((200, 150), (31, 77), (64, 48)):
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8)).save(buffer, format="PNG")
        images.append(buffer.getvalue())
    pixels = np.stack([prepare_image(data, metadata.record_of(ClipMetadata).image, max_pixels=10**8) for data in images])
    with torch.no_grad():
        expected = model.encode_image(torch.stack([preprocess(Image.open(io.BytesIO(d))) for d in images])).numpy()
    session = onnx_session(converted, 1)
    (batched,) = session.run([EMBEDDING], {PIXELS: pixels})
    alone = np.concatenate([session.run([EMBEDDING], {PIXELS: pixels[i : i + 1]})[0] for i in range(len(pixels))])
    assert cosine_rows(batched, expected).min() >= 0.9999
    assert cosine_rows(alone, expected).min() >= 0.9999


def test_the_python_backend_batches_both_towers(converted, load_python_model, make_request):
    metadata = ModelMetadata.model_validate(converted.last_line)
    for part, name, shape, dtype in (
        (0, INPUT_IDS, (24,), np.int64),
        (1, PIXELS, (48, 64, 3), np.uint8),
    ):
        model_dir = converted.repository / clip_part_names(BASE)[part]
        config = text_format.Parse((model_dir / "config.pbtxt").read_text(), pb.ModelConfig())
        instance = load_python_model(model_dir / "1" / "model.py").TritonPythonModel()
        instance.initialize(
            {
                "model_config": json_format.MessageToJson(config, preserving_proto_field_name=True),
                "model_repository": str(model_dir),
                "model_version": "1",
            }
        )
        rng = np.random.default_rng(part)
        high = 49407 if dtype is np.int64 else 255
        requests = [make_request(**{name: rng.integers(0, high, (rows, *shape)).astype(dtype)}) for rows in (2, 1, 3)]
        wrong = make_request(**{name: np.zeros((1, *shape[:-1], shape[-1] + 1), dtype)})
        responses = instance.answer([requests[0], wrong, requests[1], requests[2]])
        assert responses[1].has_error() and "must be" in responses[1].error.message()
        together = [r for i, r in enumerate(responses) if i != 1]
        alone = [instance.answer([r])[0] for r in requests]
        for batched, single in zip(together, alone):
            assert batched.output(EMBEDDING).shape[1] == metadata.embedding_dim
            np.testing.assert_allclose(batched.output(EMBEDDING), single.output(EMBEDDING), atol=1e-5)
        instance.finalize()


@pytest.mark.parametrize(
    "overrides, code, message",
    [
        ({"model_name": "no-such-architecture"}, 2, "not an OpenCLIP architecture"),
        ({"pretrained": "no_such_tag"}, 2, "neither a pretrained tag"),
        ({"pretrained": "relative/checkpoint.pt"}, 2, "absolute path"),
        ({"model_name": "embedgate-tiny-clip-wider"}, 1, "does not fit"),
    ],
    ids=["unknown-architecture", "unknown-tag", "relative-path", "checkpoint-of-another-model"],
)
def test_failures_publish_nothing(tiny, run_conversion, tmp_path, overrides, code, message):
    wider = {**TINY_CLIP_CONFIG, "text_cfg": {**TINY_CLIP_CONFIG["text_cfg"], "width": 96}}
    (tiny.config_dir / "embedgate-tiny-clip-wider.json").write_text(json.dumps(wider))
    run = run_conversion(clip_spec(tiny, tmp_path / "repo", **overrides))
    assert run.returncode == code, run.stderr[-2000:]
    assert message in run.last_line["error"]
    assert not (tmp_path / "repo").exists() or list((tmp_path / "repo").iterdir()) == []


def test_stdout_is_only_the_metadata_line(converted):
    assert len(converted.stdout.strip().splitlines()) == 1
    assert json.loads(converted.stdout)["kind"] == "clip"


@pytest.fixture(scope="module", params=["t5", "gemma"], ids=["siglip", "siglip2"])
def siglip(request, tmp_path_factory):
    """A tiny SigLIP (T5-like Unigram tokenizer) or SigLIP2 (Gemma-like BPE tokenizer)."""
    return build_tiny_siglip(tmp_path_factory.mktemp("tiny-siglip"), tokenizer=request.param)


def test_a_model_with_a_hugging_face_tokenizer_converts_and_reproduces_open_clip(siglip, run_conversion, tmp_path):
    import torch

    run = run_conversion(clip_spec(siglip, tmp_path / "repo", triton_name="tiny_siglip"))
    assert run.returncode == 0, run.stderr[-3000:]
    metadata = ModelMetadata.model_validate(run.last_line)
    model, _, tokenizer = reference_model(siglip)
    text_dir = run.repository / clip_part_names("tiny_siglip")[0]
    assert ModelMetadata.model_validate_json((text_dir / "metadata.json").read_text()) == metadata
    clip = metadata.record_of(ClipMetadata)
    text = clip.text
    assert text == HFClipText(context_length=16, clean="canonicalize", pad_token_id=tokenizer.tokenizer.pad_token_id)
    assert metadata.max_seq_length == 16 and metadata.embedding_dim == 32
    assert metadata.parity.min_cosine >= 0.9999 and clip.image_parity.min_cosine >= 0.9999

    texts = ["A Photo of a CAT!", "a photo of a dog playing in the snow " * 8, "Ünïcödé ☃ &amp; co", "", "   "]
    ids = clip_tokenizer(text_dir / "tokenizer" / "tokenizer.json", text).encode(texts).input_ids
    np.testing.assert_array_equal(ids, tokenizer(texts).numpy())
    with torch.no_grad():
        expected = model.encode_text(tokenizer(texts)).numpy()
    (served,) = onnx_session(run, 0, "tiny_siglip").run([EMBEDDING], {INPUT_IDS: ids})
    assert cosine_rows(served, expected).min() >= 0.9999
