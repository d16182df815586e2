"""torchvision's uint8 resize (what a Hugging Face image processor of the torchvision
backend runs), replayed in numpy: the same pixels, exactly, down and up, either filter."""

from __future__ import annotations

import numpy as np
import pytest

from embedgate.contract.preprocess.resample import coefficients, resize


def torchvision_resize(image: np.ndarray, height: int, width: int, kind: str) -> np.ndarray:
    import torch
    from torchvision.transforms.v2 import functional as tvF

    mode = {"bicubic": tvF.InterpolationMode.BICUBIC, "bilinear": tvF.InterpolationMode.BILINEAR}[kind]
    tensor = torch.from_numpy(image).permute(2, 0, 1).contiguous()
    return tvF.resize(tensor, [height, width], interpolation=mode, antialias=True).permute(1, 2, 0).numpy()


SIZES = [
    ((480, 640), (224, 298)),  # down, both sides
    ((37, 100), (224, 605)),  # up, both sides
    ((300, 300), (224, 224)),
    ((224, 224), (64, 64)),
    ((80, 50), (51, 32)),
    ((5, 7), (160, 224)),  # a tiny image blown up
    ((1, 1), (224, 224)),
    ((277, 352), (67, 248)),
    ((200, 40), (200, 90)),  # the width only
    ((40, 200), (90, 200)),  # the height only
]


@pytest.mark.parametrize("kind", ["bicubic", "bilinear"])
@pytest.mark.parametrize("before, after", SIZES)
def test_random_pixels_resize_exactly_as_torchvision(before, after, kind):
    image = np.random.default_rng(sum(before) + sum(after)).integers(0, 256, (*before, 3), dtype=np.uint8)
    assert np.array_equal(resize(image, *after, kind), torchvision_resize(image, *after, kind))


def test_smooth_pictures_resize_exactly_as_torchvision():
    y, x = np.mgrid[0:333, 0:517]
    image = np.stack([x * 255 // 516, y * 255 // 332, (x * y) % 256], axis=-1).astype(np.uint8)
    for after in ((224, 347), (40, 40), (700, 1000)):
        assert np.array_equal(resize(image, *after, "bicubic"), torchvision_resize(image, *after, "bicubic"))


def test_weights_fit_int16_and_sum_to_one_in_fixed_point():
    for before, after in ((640, 298), (37, 605), (3000, 224)):
        first, weights, bits = coefficients(before, after, "bicubic")
        assert weights.max() < 1 << 15 and 0 < bits <= 22
        # Each output's weights add up to 1 (2 ** bits) within their rounding.
        assert np.all(np.abs(weights.sum(axis=1) - (1 << bits)) <= weights.shape[1])
        assert first.min() >= 0 and first.max() < before


def test_an_unchanged_size_is_the_image_itself():
    image = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
    assert np.array_equal(resize(image, 4, 6, "bicubic"), image)
