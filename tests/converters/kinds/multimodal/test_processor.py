"""A multimodal Transformer's image processor read as what the gateway replays, or refused
with the reason where it cannot replay it exactly."""

from __future__ import annotations

import numpy as np
import pytest

from embedgate.contract.errors import UnsupportedModelError
from embedgate.converters.kinds.multimodal.processor import check_replay, processor_images
from tests.contract.preprocess.test_processor_images import Wrapped, clip_processor


def refusal(image_processor, **options) -> str:
    with pytest.raises(UnsupportedModelError) as refused:
        processor_images(Wrapped(image_processor, **options))
    assert refused.value.exit_code == 8
    return str(refused.value)


def test_clips_processor_is_read_as_its_steps():
    images = processor_images(Wrapped(clip_processor("torchvision")))
    assert (images.processor, images.backend, images.shortest_edge, images.crop_height, images.crop_width) == (
        "CLIPImageProcessor", "torchvision", 40, 32, 32
    )
    assert (images.height, images.width, images.interpolation) == (32, 32, "bicubic")
    assert images.rescale == pytest.approx(1 / 255) and images.mean[0] == pytest.approx(0.48145466)


def test_a_processor_with_code_of_its_own_is_refused():
    from transformers import ConvNextImageProcessor

    assert "code of its own (resize, _preprocess)" in refusal(ConvNextImageProcessor())


def test_settings_that_leave_images_of_different_sizes_are_refused():
    assert "different sizes" in refusal(clip_processor("torchvision", do_center_crop=False))


def test_padding_to_the_batch_an_unknown_filter_and_no_rgb_are_refused():
    assert "pads images to the largest of a batch" in refusal(clip_processor("torchvision", do_pad=True))
    assert "filter 0" in refusal(clip_processor("torchvision", resample=0))
    assert "does not convert images to RGB" in refusal(clip_processor("pil", do_convert_rgb=False))


def test_settings_the_model_passes_the_processor_are_refused():
    reason = refusal(clip_processor("torchvision"), processing_kwargs={"image": {"size": {"shortest_edge": 64}}})
    assert "settings of the model's own" in reason


def test_a_replay_that_differs_from_the_processor_is_refused_naming_the_image():
    wrapped = Wrapped(clip_processor("torchvision"))
    images = processor_images(wrapped)
    pixels = np.zeros((2, 32, 32, 3), dtype=np.uint8)
    expected = np.stack([np.zeros((3, 32, 32)), np.zeros((3, 32, 32))]).astype(np.float32)
    expected[:] = ((0 - np.asarray(images.mean)) / np.asarray(images.std)).reshape(1, 3, 1, 1)
    assert check_replay(wrapped, images, pixels, expected, ["a", "b"]) < 1e-5
    expected[1, 0, 5, 5] += 0.02  # one level of one pixel
    with pytest.raises(UnsupportedModelError) as refused:
        check_replay(wrapped, images, pixels, expected, ["first image", "second image"])
    assert "the second image: pixel values differ by up to 0.02" in str(refused.value)
