"""A vision-language model's two graphs (``vision_language.py``) and the positions the
gateway computes for them (``vision_language_positions.py``), against the library: the
positions equal transformers' own, and the exported graphs run by onnxruntime give
``encode``'s embeddings for texts and for images of other sizes than they were traced on.
The graphs are fed the library's own processor features here."""

from __future__ import annotations

import numpy as np
import pytest

from embedgate.contract.preprocess.vision_language_positions import token_positions, vision_positions
from embedgate.converters.kinds.multimodal import vision_language as vl
from tests.multimodal_models import vision_language_model

TEXTS = ["a photo of a cat", "two words", "the quick brown fox jumps over the lazy dog " * 3]


def picture(height: int, width: int, seed: int):
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(vision_language_model(tmp_path_factory.mktemp("vl") / "m", seed=3)), device="cpu")


@pytest.fixture(scope="module")
def graphs(model, tmp_path_factory):
    import torch

    transformer, merge = model[0], model[0].auto_model.config.vision_config.spatial_merge_size
    backbone = transformer.auto_model
    directory = tmp_path_factory.mktemp("graphs")
    features = transformer.preprocess([picture(70, 90, 0), picture(56, 56, 1)])
    grids = features["image_grid_thw"].tolist()
    first = grids[0][0] * grids[0][1] * grids[0][2]
    vision = vl.vision_graph(backbone)
    example = {vl.PIXEL_VALUES: features["pixel_values"][:first],
               vl.POSITION_IDS: torch.from_numpy(vision_positions(grids[0], merge))}
    vl.export_vision(vision, example, directory / "vision.onnx", [transformer])
    with torch.no_grad():
        image_embeds = torch.cat([vision(*embed_inputs(features, grids, merge, n)) for n in range(len(grids))])
    mask = features["attention_mask"]
    example = {
        vl.INPUT_IDS: features["input_ids"], vl.ATTENTION_MASK: mask, vl.IMAGE_EMBEDS: image_embeds,
        vl.POSITION_IDS: torch.from_numpy(token_positions(mask.numpy(), features["mm_token_type_ids"].numpy(), grids, merge)),
    }
    language = vl.language_graph(backbone, list(model)[1:], backbone.config.image_token_id)
    vl.export_language(language, example, directory / "language.onnx", list(model))
    return directory


def embed_inputs(features, grids, merge, number):
    """The vision graph's inputs for image ``number`` of a processed batch."""
    import torch

    sizes = [t * h * w for t, h, w in grids]
    start = sum(sizes[:number])
    pixels = features["pixel_values"][start : start + sizes[number]]
    return pixels, torch.from_numpy(vision_positions(grids[number], merge))


@pytest.mark.parametrize("grid", [(1, 4, 6), (1, 8, 4), (2, 6, 6), (1, 2, 2)])
def test_vision_positions_are_transformers_own(grid):
    import torch
    from transformers.vision_utils import get_vision_position_ids

    expected = get_vision_position_ids(torch.tensor([grid]), 2).numpy()
    assert np.array_equal(vision_positions(grid, 2), expected)


def test_token_positions_are_transformers_own_where_a_token_is_attended(model):
    transformer = model[0]
    backbone = transformer.auto_model
    features = transformer.preprocess([picture(70, 90, 2), picture(120, 60, 3), picture(56, 56, 4)])
    mask = features["attention_mask"]
    expected, _ = backbone.get_rope_index(
        features["input_ids"], features["mm_token_type_ids"], features["image_grid_thw"], attention_mask=mask
    )
    merge = backbone.config.vision_config.spatial_merge_size
    mine = token_positions(mask.numpy(), features["mm_token_type_ids"].numpy(), features["image_grid_thw"].tolist(), merge)
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
def test_the_exported_graphs_give_encodes_embeddings(model, graphs, inputs):
    import onnxruntime

    transformer = model[0]
    merge = transformer.auto_model.config.vision_config.spatial_merge_size
    vision = onnxruntime.InferenceSession(str(graphs / "vision.onnx"), providers=["CPUExecutionProvider"])
    language = onnxruntime.InferenceSession(str(graphs / "language.onnx"), providers=["CPUExecutionProvider"])
    features = transformer.preprocess(inputs)
    grids = features["image_grid_thw"].tolist() if "image_grid_thw" in features else []
    rows = [
        vision.run(None, {vl.PIXEL_VALUES: pixels.numpy(), vl.POSITION_IDS: positions.numpy()})[0]
        for pixels, positions in (embed_inputs(features, grids, merge, n) for n in range(len(grids)))
    ]
    hidden = transformer.auto_model.config.text_config.hidden_size
    mask = features["attention_mask"].numpy()
    embeddings = language.run(None, {
        vl.INPUT_IDS: features["input_ids"].numpy(), vl.ATTENTION_MASK: mask,
        vl.POSITION_IDS: token_positions(mask, features["mm_token_type_ids"].numpy(), grids, merge),
        vl.IMAGE_EMBEDS: np.concatenate(rows) if rows else np.zeros((0, hidden), np.float32),
    })[0]
    expected = model.encode(inputs)
    assert np.abs(embeddings - expected).max() < 1e-4
    cosine = (embeddings * expected).sum(-1) / np.linalg.norm(embeddings, axis=-1) / np.linalg.norm(expected, axis=-1)
    assert cosine.min() >= 0.9999
