"""Resizing uint8 images as torchvision resizes them on the CPU, in numpy.

A Hugging Face image processor of the torchvision backend resizes uint8 tensors with
``torchvision.transforms.v2.functional.resize(..., antialias=True)``, whose CPU kernel is
Pillow's algorithm (a separable convolution with Pillow's filters and support) in fixed
point, but with weights of at most 16 bits where Pillow's have 22, and always the width
first: its results differ from Pillow's ``Image.resize`` by a level or two in some pixels.
This replays that kernel exactly: the same weights, normalized and rounded the same way,
the same rounding of each sum, the same order of the passes.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

Interpolation = Literal["bicubic", "bilinear"]
# The most bits torchvision gives a weight (Pillow's fixed-point precision).
MAX_PRECISION = 22
# torchvision's weights are int16: the largest weight times 2 ** (precision + 1) stays below this.
_INT16_LIMIT = 1 << 15
_SUPPORT = {"bicubic": 2.0, "bilinear": 1.0}


def _filter(kind: Interpolation, x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    if kind == "bilinear":
        return np.where(x < 1.0, 1.0 - x, 0.0)
    # Pillow's bicubic (a = -0.5).
    a = -0.5
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    far = (((x - 5) * x + 8) * x - 4) * a
    return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))


def coefficients(in_size: int, out_size: int, kind: Interpolation) -> tuple[np.ndarray, np.ndarray, int]:
    """For each output position, the first input position it reads and its weights (int,
    ``[out_size, taps]``, 0 past its own taps), and the weights' precision in bits: the
    most that keeps every weight within int16, as torchvision chooses it."""
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = _SUPPORT[kind] * filterscale
    inverse = 1.0 / filterscale
    centers = (np.arange(out_size, dtype=np.float64) + 0.5) * scale
    # C's (int) truncates toward zero, as astype does.
    first = np.maximum((centers - support + 0.5).astype(np.int64), 0)
    last = np.minimum((centers + support + 0.5).astype(np.int64), in_size)
    taps = last - first
    offsets = np.arange(int(taps.max()))
    weights = _filter(kind, (offsets[None, :] + first[:, None] - centers[:, None] + 0.5) * inverse)
    weights = np.where(offsets[None, :] < taps[:, None], weights, 0.0)
    totals = weights.sum(axis=1, keepdims=True)
    weights = np.divide(weights, totals, out=np.zeros_like(weights), where=totals != 0)
    largest = float(weights.max())
    precision = 0
    while precision < MAX_PRECISION - 1 and int(0.5 + largest * (1 << (precision + 1))) < _INT16_LIMIT:
        precision += 1
    scaled = weights * (1 << precision)
    fixed = np.where(scaled < 0, (scaled - 0.5).astype(np.int64), (scaled + 0.5).astype(np.int64))
    return first, fixed, precision


def _pass(image: np.ndarray, axis: int, out_size: int, kind: Interpolation) -> np.ndarray:
    """``image`` (uint8 ``[height, width, channels]``) resampled along ``axis``."""
    first, weights, bits = coefficients(image.shape[axis], out_size, kind)
    last = image.shape[axis] - 1
    # The axis first and contiguous, so each tap gathers whole rows; int32 once, not per tap.
    moved = np.ascontiguousarray(np.moveaxis(image, axis, 0), dtype=np.int32)
    rest = moved.shape[1:]
    moved = moved.reshape(moved.shape[0], -1)
    # Sums fit int32: the weights' magnitudes add up to little more than 2 ** bits (< 2 ** 22).
    total = np.full((out_size, moved.shape[1]), 1 << (bits - 1), dtype=np.int32)
    product = np.empty_like(total)
    for tap in range(weights.shape[1]):
        rows = np.minimum(first + tap, last)
        np.multiply(moved[rows], weights[:, tap, None].astype(np.int32), out=product)
        total += product
    out = np.clip(total >> bits, 0, 255).astype(np.uint8).reshape((out_size, *rest))
    return np.moveaxis(out, 0, axis)


def resize(image: np.ndarray, height: int, width: int, kind: Interpolation) -> np.ndarray:
    """uint8 ``[height, width, channels]`` resized as torchvision resizes it: the width
    first, then the height, each only where it changes."""
    if image.shape[1] != width:
        image = _pass(image, 1, width, kind)
    if image.shape[0] != height:
        image = _pass(image, 0, height, kind)
    return np.ascontiguousarray(image)
