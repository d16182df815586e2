"""A vision-language model's two graphs (``graphs.py``), and the images and
positions the gateway prepares for them (``vision_language_images.py``,
``vision_language_positions.py``), against the library: the images are the processor's
pixels, the positions transformers' own, and the exported graphs run by onnxruntime give
``encode``'s embeddings for texts and for images of other sizes than they were traced on.
The token ids are the gateway's own too: the chat template's rendering recorded around
markers, an input put in it and tokenized, right-padded (``vision_language_text.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from embedgate.contract.preprocess.vision_language_images import prepare_patches
from embedgate.contract.preprocess.vision_language_positions import (
    attention_windows,
    position_interpolation,
    token_positions,
    vision_inputs,
    vision_positions,
)
from embedgate.contract.preprocess.vision_language_text import MessageTokenizer
from embedgate.converters.kinds.vision_language import graphs as vl
from embedgate.converters.library.parity import reference_token_ids
from tests.multimodal_models import vision_language_model

TEXTS = ["a photo of a cat", "two words", "the quick brown fox jumps over the lazy dog " * 3]


def picture(height: int, width: int, seed: int):
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


@pytest.fixture(scope="module", params=["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def model(request, tmp_path_factory):
    """Qwen2-VL's form, Qwen2.5-VL's (layers that attend within windows) and Qwen3-VL's (its
    learned position grid, its deepstack rows)."""
    from sentence_transformers import SentenceTransformer

    path = vision_language_model(tmp_path_factory.mktemp("vl") / "m", seed=3, architecture=request.param)
    return SentenceTransformer(str(path), device="cpu")


@pytest.fixture(scope="module")
def spec(model):
    return vl.patch_images(model[0].processor.image_processor)


@pytest.fixture(scope="module")
def graphs(model, spec, tmp_path_factory):
    import torch

    transformer = model[0]
    backbone = transformer.auto_model
    directory = tmp_path_factory.mktemp("graphs")
    images = [picture(70, 90, 0), picture(56, 56, 1)]
    features = transformer.preprocess(images)
    prepared = [prepare_patches(image, spec) for image in images]
    vision = vl.vision_graph(backbone, spec)
    example = {name: torch.from_numpy(value) for name, value in graph_inputs(*prepared[0], spec, backbone)[0].items()}
    vl.export_vision(vision, example, directory / "vision.onnx", [transformer])
    image_embeds = torch.from_numpy(np.concatenate([
        image_rows(lambda feeds: vision(*map(torch.from_numpy, feeds.values())).detach().numpy(), *each, spec, backbone)
        for each in prepared
    ], 1))
    mask = features["attention_mask"]
    grids = [grid for _, grid in prepared]
    example = {
        vl.INPUT_IDS: features["input_ids"], vl.ATTENTION_MASK: mask, vl.IMAGE_EMBEDS: image_embeds,
        vl.POSITION_IDS: torch.from_numpy(
            token_positions(mask.numpy(), features["mm_token_type_ids"].numpy(), grids, spec.merge_size)
        ),
    }
    language = vl.language_graph(backbone, list(model)[1:], backbone.config.image_token_id)
    vl.export_language(language, example, directory / "language.onnx", list(model))
    return directory


def graph_inputs(patches, grid, spec, backbone):
    """The vision graph's tensors for one image, as the gateway makes them, and the order
    that puts its rows back (or None)."""
    return vision_inputs(patches, grid, spec, vl.position_grid(backbone), vl.window_size(backbone))


def image_rows(run, patches, grid, spec, backbone) -> np.ndarray:
    feeds, restore = graph_inputs(patches, grid, spec, backbone)
    rows = run(feeds)
    return rows if restore is None else rows[:, restore]


@pytest.mark.parametrize("size", [(70, 90), (120, 60), (40, 40), (600, 380), (28, 29)])
def test_an_image_is_prepared_as_the_processor_prepares_it(model, spec, size):
    image = picture(*size, seed=size[0])
    features = model[0].processor.image_processor([image], return_tensors="np")
    patches, grid = prepare_patches(image, spec)
    assert [list(grid)] == features["image_grid_thw"].tolist()
    # What the vision graph's first nodes make of them: normalized, repeated over time.
    scale = spec.rescale
    values = (patches.astype(np.float32).reshape(len(patches), 3, 1, -1) - np.float32(np.asarray(spec.mean) / scale)
              .reshape(1, 3, 1, 1)) / np.float32(np.asarray(spec.std) / scale).reshape(1, 3, 1, 1)
    values = np.repeat(values, spec.temporal_patch_size, axis=2).reshape(len(patches), -1)
    assert np.abs(values - features["pixel_values"]).max() < 1e-5


@pytest.mark.parametrize("grid", [(1, 4, 6), (1, 8, 4), (2, 6, 6), (1, 2, 2)])
def test_vision_positions_are_transformers_own(grid):
    import torch
    from transformers.vision_utils import get_vision_position_ids

    expected = get_vision_position_ids(torch.tensor([grid]), 2).numpy()
    assert np.array_equal(vision_positions(grid, 2), expected)


@pytest.mark.parametrize("grid", [(1, 4, 6), (1, 8, 4), (1, 2, 2), (1, 14, 10), (1, 16, 16), (1, 6, 22)])
def test_windows_are_transformers_own(grid):
    """Qwen2.5-VL's: the patches' order window by window, the same windows, the order back."""
    import torch
    from transformers.vision_utils import get_vision_window_index

    index, bounds = get_vision_window_index(torch.tensor([grid]), 2, 56, 14)
    order, windows, restore = attention_windows(grid, 2, 56, 14)
    assert np.array_equal(order[::4] // 4, index.numpy()) and np.array_equal(restore, torch.argsort(index).numpy())
    assert np.array_equal(windows, np.repeat(np.arange(len(bounds) - 1), np.diff(bounds.numpy())))


@pytest.mark.parametrize("grid", [(1, 4, 6), (1, 8, 4), (2, 6, 6), (1, 2, 2), (1, 14, 10)])
@pytest.mark.parametrize("side", [4, 48])
def test_the_position_grid_is_resampled_as_transformers_resamples_it(grid, side):
    """Qwen3-VL's learned grid, bilinear with aligned corners: the same taps, the same float32 weights."""
    import torch
    from transformers.vision_utils import get_vision_interpolation_indices_and_weights

    indices, weights = get_vision_interpolation_indices_and_weights(
        torch.tensor([grid]), side, mode="bilinear", align_corners=True, spatial_merge_size=2
    )
    mine = position_interpolation(grid, side, 2)
    assert np.array_equal(mine[0], indices.numpy()) and np.array_equal(mine[1], weights.numpy())


def test_token_positions_are_transformers_own_where_a_token_is_attended(model):
    transformer = model[0]
    backbone = transformer.auto_model
    features = transformer.preprocess([picture(70, 90, 2), picture(120, 60, 3), picture(56, 56, 4)])
    mask = features["attention_mask"]
    expected, _ = backbone.get_rope_index(
        features["input_ids"], features["mm_token_type_ids"], features["image_grid_thw"], attention_mask=mask
    )
    merge = backbone.config.vision_config.spatial_merge_size
    types, grids = features["mm_token_type_ids"].numpy(), features["image_grid_thw"].tolist()
    mine = token_positions(mask.numpy(), types, grids, merge)
    kept = mask.numpy() == 1
    assert (~kept).any(), "the batch should be padded"
    for row in range(len(kept)):
        assert np.array_equal(mine[:, row, kept[row]], expected.numpy()[:, row, kept[row]])


@pytest.mark.parametrize("inputs", [
    TEXTS,
    TEXTS[1:2],
    [picture(70, 90, 5), picture(120, 60, 6), picture(200, 150, 7)],
    [picture(40, 40, 8)],
], ids=["texts", "one text", "images", "one small image"])
def test_the_exported_graphs_give_encodes_embeddings(model, spec, graphs, inputs, tmp_path):
    """Everything the gateway computes (token ids, patches, positions), then the graphs."""
    import onnxruntime

    transformer = model[0]
    vision = onnxruntime.InferenceSession(str(graphs / "vision.onnx"), providers=["CPUExecutionProvider"])
    language = onnxruntime.InferenceSession(str(graphs / "language.onnx"), providers=["CPUExecutionProvider"])
    tokenizer = gateway_tokenizer(transformer, tmp_path)
    prepared = [prepare_patches(image, spec) for image in inputs if not isinstance(image, str)]
    grids = [grid for _, grid in prepared]
    batch = tokenizer.encode_images([spec.tokens(grid) for grid in grids]) if grids else tokenizer.encode(inputs)
    ids, mask = batch.input_ids, batch.attention_mask
    rows = [
        image_rows(lambda feeds: vision.run(None, feeds)[0], patches, grid, spec, transformer.auto_model)
        for patches, grid in prepared
    ]
    hidden = transformer.auto_model.config.text_config.hidden_size
    levels = 1 + vl.deepstack_levels(transformer.auto_model)
    embeddings = language.run(None, {
        vl.INPUT_IDS: ids, vl.ATTENTION_MASK: mask,
        vl.POSITION_IDS: token_positions(mask, tokenizer.image_tokens(batch), grids, spec.merge_size),
        vl.IMAGE_EMBEDS: np.concatenate(rows, axis=1) if rows else np.zeros((levels, 0, hidden), np.float32),
    })[0]
    expected = model.encode(inputs)
    assert np.abs(embeddings - expected).max() < 1e-4
    cosine = (embeddings * expected).sum(-1) / np.linalg.norm(embeddings, axis=-1) / np.linalg.norm(expected, axis=-1)
    assert cosine.min() >= 0.9999


def gateway_tokenizer(transformer, directory, max_length: int = 100_000) -> MessageTokenizer:
    """The model's tokenizer as the gateway loads it, behind the template the converter records."""
    tokenizer_file = directory / "tokenizer.json"
    transformer.processor.tokenizer.backend_tokenizer.save(str(tokenizer_file))
    return MessageTokenizer(tokenizer_file, max_length, vl.message_template(transformer))


@pytest.mark.parametrize("prompt", [None, "query: "])
def test_texts_and_images_become_the_librarys_token_ids(model, spec, prompt, tmp_path):
    from embedgate.contract.preprocess.prompted import PromptedText

    transformer = model[0]
    tokenizer = gateway_tokenizer(transformer, tmp_path)
    texts = ["hello world", "Grüße, 世界! <b>bold</b>", "  spaced  out  ", TEXTS[2]]
    images = [picture(70, 90, 9), picture(200, 150, 10)]
    options = {} if prompt is None else {"prompt": prompt}
    for inputs, batch in (
        (texts, tokenizer.encode([PromptedText(prompt, text) if prompt else text for text in texts])),
        (images, tokenizer.encode_images([spec.tokens(prepare_patches(one, spec)[1]) for one in images], prompt or "")),
    ):
        features = transformer.preprocess(inputs, **options)
        mask = features["attention_mask"].numpy()
        assert reference_token_ids(batch.input_ids, batch.attention_mask) == reference_token_ids(
            features["input_ids"].numpy(), mask
        )
        types = features["mm_token_type_ids"].numpy()
        assert [row[m == 1].tolist() for row, m in zip(types, mask)] == [
            row[m == 1].tolist() for row, m in zip(tokenizer.image_tokens(batch), batch.attention_mask)
        ]


def test_an_input_of_a_text_and_an_image_becomes_the_librarys_token_ids(model, spec, tmp_path):
    """One message of both parts, in either order (the library's dict input)."""
    transformer = model[0]
    tokenizer = gateway_tokenizer(transformer, tmp_path)
    assert tokenizer.template.parts_joined
    images = [picture(70, 90, 11), picture(40, 40, 12)]
    tokens = [spec.tokens(prepare_patches(image, spec)[1]) for image in images]
    inputs = [{"text": "caption: a cat", "image": images[0]}, {"image": images[1], "text": "Grüße"}]
    batch = tokenizer.encode_parts([["caption: a cat", tokens[0]], [tokens[1], "Grüße"]], "query: ")
    features = transformer.preprocess(inputs, prompt="query: ")
    assert reference_token_ids(batch.input_ids, batch.attention_mask) == reference_token_ids(
        features["input_ids"].numpy(), features["attention_mask"].numpy()
    )


def test_a_text_past_the_max_length_is_cut_as_the_library_cuts_it(model, tmp_path):
    """Cut at the max length, the template's last tokens written back over the end."""
    transformer = model[0]
    tokenizer = gateway_tokenizer(transformer, tmp_path, max_length=24)
    texts = ["word " * 40, "short", "tokens " * 23]
    before = transformer.max_seq_length
    transformer.max_seq_length = 24
    try:
        features = transformer.preprocess(texts)
    finally:
        transformer.max_seq_length = before
    batch = tokenizer.encode(texts)
    assert reference_token_ids(batch.input_ids, batch.attention_mask) == reference_token_ids(
        features["input_ids"].numpy(), features["attention_mask"].numpy()
    )
    assert batch.truncated_rows[:2] == [True, False] and batch.token_counts[0] == 24
    assert batch.input_ids[0, 22:24].tolist() == tokenizer.template.suffix_ids[-2:]
