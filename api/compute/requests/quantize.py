"""Embeddings in lower precisions, as ``sentence_transformers.quantization.quantize_embeddings``
computes them, with numpy only (the serving path never imports torch).

- ``int8`` / ``uint8``: each dimension's ``[min, max]`` cut into 256 steps; the ranges are
  the model's own, calibrated once at conversion (``converters/calibration.py``), never
  taken from the request, so the same text always gives the same bytes;
- ``binary`` / ``ubinary``: one bit per dimension (``> 0``), packed eight to a byte
  (``int8`` offset by -128, or ``uint8``): ``ceil(dim / 8)`` values per vector.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from embedgate.contract.spec import Calibration

from ...errors import InvalidInput

Precision = Literal["float32", "int8", "uint8", "binary", "ubinary"]
PRECISIONS: tuple[Precision, ...] = ("float32", "int8", "uint8", "binary", "ubinary")
CALIBRATED: tuple[Precision, ...] = ("int8", "uint8")


def quantize(vectors: np.ndarray, precision: Precision, ranges: list[list[float]] | None = None) -> np.ndarray:
    """``vectors`` (float32 [n, dim]) in ``precision``; ``ranges`` (``[[min...], [max...]]``)
    for int8 and uint8."""
    if precision == "float32":
        return vectors
    if precision in CALIBRATED:
        if ranges is None:
            raise ValueError(f"{precision} needs calibration ranges")
        bounds = np.asarray(ranges, dtype=np.float32)
        starts = bounds[0]
        steps = (bounds[1] - starts) / 255
        steps = np.where(steps == 0, 1, steps)
        levels = np.clip(np.floor((vectors - starts) / steps), 0, 255)
        return levels.astype(np.uint8) if precision == "uint8" else (levels - 128).astype(np.int8)
    if precision == "binary":
        return (np.packbits(vectors > 0, axis=-1) - 128).astype(np.int8)
    if precision == "ubinary":
        return np.packbits(vectors > 0, axis=-1)
    raise ValueError(f"unknown precision {precision!r}")


def available(calibration: Calibration | None) -> tuple[Precision, ...]:
    """The precisions a model's dense embeddings come in (int8/uint8 need its calibration)."""
    return PRECISIONS if calibration is not None else tuple(p for p in PRECISIONS if p not in CALIBRATED)


def quantized(
    vectors: np.ndarray, precision: Precision, calibration: Calibration | None, *, normalized: bool, what: str
) -> np.ndarray:
    """``vectors`` (unit length where ``normalized``) in ``precision``, with the model's ranges
    for those vectors; a 400 where the model has none (``what`` names them in the message)."""
    if precision not in CALIBRATED:
        return quantize(vectors, precision)
    if calibration is None:
        raise InvalidInput(
            f"{precision} needs ranges calibrated at conversion, which {what} do not have "
            "(converted before they were recorded, or image embeddings); use float32, binary or ubinary"
        )
    return quantize(vectors, precision, calibration.normalized_ranges if normalized else calibration.ranges)
