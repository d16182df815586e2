"""A multimodal model's graphs for GPU instances: the text stack and the image graph, each
traced with TorchScript (on the CPU here: the same code the converter runs on CUDA) and
checked against ``encode`` on other batch sizes than they were traced on."""

from __future__ import annotations

import numpy as np
import pytest

from embedgate.contract.spec import ATTENTION_MASK, INPUT_IDS, PIXELS
from embedgate.converters.kinds.multimodal.image_graph import image_module
from embedgate.converters.kinds.multimodal.processor import processor_images
from embedgate.converters.library import gpu, image_parity, parity
from tests.multimodal_models import CLIP_POSITIONS, clip_form_model


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from sentence_transformers import SentenceTransformer

    loaded = SentenceTransformer(str(clip_form_model(tmp_path_factory.mktemp("clip-form") / "m")), device="cpu")
    loaded[0].max_seq_length = CLIP_POSITIONS
    return loaded.float().eval()


def test_both_graphs_trace_and_keep_parity_with_encode(model, tmp_path):
    import torch

    modules = list(model)
    sentences = ["a photo of a cat", "a diagram", "the quick brown fox " * 3]
    features = model.preprocess(sentences)
    token_ids = parity.reference_token_ids(features[INPUT_IDS].numpy(), features[ATTENTION_MASK].numpy())
    text = gpu.build(
        model, model.preprocess(sentences[:2]), tmp_path / "text",
        lambda run, half: parity.check_run(run, token_ids, model.encode(sentences, prompt=""), 0.9999),
        lambda line: None, half=False, device="cpu",
    )
    images = processor_images(modules[0])
    labels, encoded = zip(*image_parity.parity_images())
    pixels = image_parity.gateway_pixels(encoded, images)
    reference = model.encode(image_parity.decoded(encoded))
    image = gpu.build_module(
        lambda dtype, device: image_module(modules, images, dtype, device), [torch.from_numpy(pixels[:2])],
        tmp_path / "image",
        lambda run, half: image_parity.check_images(run, pixels, reference, 0.9999, labels),
        lambda line: None, input_names=[PIXELS], half=False, device="cpu",
    )
    assert (text.dtype, image.dtype) == ("float32", "float32")
    assert text.parity.min_cosine >= 0.9999 and image.parity.min_cosine >= 0.9999
    # The caller's model is left as it was (float32, on the CPU).
    assert next(model.parameters()).dtype == torch.float32
    assert np.isfinite(reference).all()
