"""``python -m converters`` on tiny multimodal sentence-transformers (random weights, built at
test time): the CLIP form published as a text graph and an image graph, each reproducing
``SentenceTransformer.encode`` through the gateway's own preprocessing (the vision-language
form is its own kind: ``tests/converters/kinds/vision_language/``)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from google.protobuf import text_format
from PIL import Image
from tritonclient.grpc import model_config_pb2 as pb

from embedgate.contract.kinds.multimodal import MultimodalMetadata, multimodal_part_names
from embedgate.contract.preprocess.images import prepare_image
from embedgate.contract.preprocess.text import TextTokenizer
from embedgate.contract.spec import ATTENTION_MASK, EMBEDDING, INPUT_IDS, PIXELS, ModelMetadata
from embedgate.converters.library.image_parity import parity_images
from tests.helpers import cosine_rows
from tests.multimodal_models import CLIP_IMAGE_SIZE, CLIP_POSITIONS, clip_form_model

BASE = "tiny-multimodal"


def spec(path, repository) -> dict:
    return {"model_name": "org/tiny-multimodal", "model_path": str(path), "triton_name": BASE,
            "repository": str(repository)}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return clip_form_model(tmp_path_factory.mktemp("clip-form") / "model")


@pytest.fixture(scope="module")
def converted(model_dir, run_conversion, tmp_path_factory):
    run = run_conversion(spec(model_dir, tmp_path_factory.mktemp("model_repository")))
    assert run.returncode == 0, run.stderr[-3000:]
    return run


@pytest.fixture(scope="module")
def library(model_dir):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_dir), device="cpu")
    # The length the conversion served it with: its text position embeddings (its tokenizer names none).
    model[0].max_seq_length = CLIP_POSITIONS
    return model


def test_both_graphs_are_published_with_one_metadata(converted):
    text_dir, image_dir = (converted.repository / part for part in multimodal_part_names(BASE))
    assert sorted(p.name for p in converted.repository.iterdir()) == sorted([text_dir.name, image_dir.name])
    metadata = ModelMetadata.model_validate(converted.last_line)
    for part in (text_dir, image_dir):
        assert ModelMetadata.model_validate_json((part / "metadata.json").read_text()) == metadata
        assert (part / "1" / "model.onnx").is_file() and (part / "1" / "model.py").is_file()
    assert (text_dir / "tokenizer" / "tokenizer.json").is_file() and not (image_dir / "tokenizer").exists()
    record = metadata.record_of(MultimodalMetadata)
    assert metadata.kind == "multimodal" and metadata.embedding_dim == 16 and not metadata.normalized
    assert record.modalities == ["text", "image"]
    assert (record.image.processor, record.image.backend) == ("CLIPImageProcessor", "torchvision")
    assert metadata.parity.min_cosine >= 0.9999 and record.image_parity.min_cosine >= 0.9999
    assert record.image_parity.images == len(parity_images()) and record.pixel_max_error < 1e-5


def test_a_tokenizer_that_names_no_max_length_gets_the_position_embeddings(converted):
    assert ModelMetadata.model_validate(converted.last_line).max_seq_length == CLIP_POSITIONS


def test_configs_declare_each_graphs_inputs(converted):
    text_name, image_name = multimodal_part_names(BASE)
    text = text_format.Parse((converted.repository / text_name / "config.pbtxt").read_text(), pb.ModelConfig())
    image = text_format.Parse((converted.repository / image_name / "config.pbtxt").read_text(), pb.ModelConfig())
    assert [(i.name, i.allow_ragged_batch) for i in text.input] == [(INPUT_IDS, True), (ATTENTION_MASK, True)]
    size = CLIP_IMAGE_SIZE
    assert [(i.name, i.data_type, list(i.dims)) for i in image.input] == [(PIXELS, pb.TYPE_UINT8, [size, size, 3])]
    for config in (text, image):
        assert [(o.name, list(o.dims)) for o in config.output] == [(EMBEDDING, [16])]


def session(converted, part: int):
    import onnxruntime as ort

    path = converted.repository / multimodal_part_names(BASE)[part] / "1" / "model.onnx"
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_the_text_graph_matches_encode_on_new_texts(converted, library):
    metadata = ModelMetadata.model_validate(converted.last_line)
    texts = ["a diagram", "a dog playing in the snow " * 6, "Ünïcödé ☃", "x"]
    tokenizer = TextTokenizer(
        converted.repository / BASE / "tokenizer" / "tokenizer.json", metadata.max_seq_length, metadata.strip_whitespace
    )
    batch = tokenizer.encode(texts)
    (served,) = session(converted, 0).run([EMBEDDING], {INPUT_IDS: batch.input_ids, ATTENTION_MASK: batch.attention_mask})
    expected = library.encode(texts)
    assert cosine_rows(served, expected).min() >= 0.9999
    # Texts embed differently (the tiny weights are wide enough for a wrong mask to show).
    assert cosine_rows(expected[:1], expected[2:3]).max() < 0.99


def test_the_image_graph_matches_encode_through_the_gateways_preparation(converted, library):
    record = ModelMetadata.model_validate(converted.last_line).record_of(MultimodalMetadata)
    rng = np.random.default_rng(7)
    images = []
    for width, height in ((200, 150), (31, 77), (64, 48), (5, 9)):
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8)).save(buffer, format="PNG")
        images.append(buffer.getvalue())
    pixels = np.stack([prepare_image(data, record.image, max_pixels=10**8) for data in images])
    expected = library.encode([Image.open(io.BytesIO(data)) for data in images])
    graph = session(converted, 1)
    (batched,) = graph.run([EMBEDDING], {PIXELS: pixels})
    alone = np.concatenate([graph.run([EMBEDDING], {PIXELS: pixels[i : i + 1]})[0] for i in range(len(pixels))])
    assert cosine_rows(batched, expected).min() >= 0.9999 and cosine_rows(alone, expected).min() >= 0.9999
    assert cosine_rows(expected[:1], expected[1:2]).max() < 0.99
