"""A backend that runs no model: zeros of the shape the model's graph gives. Everything a
request costs the server but the model's forward (``EMBEDGATE_NOOP_INFERENCE``, for
measuring the server's own cost per request)."""

from __future__ import annotations

import numpy as np

from ..requests.served import ServedModel
from .base import Tensors


class NoopBackend:
    async def infer(
        self, model: ServedModel, part: str, tensors: Tensors, output: str, *, timeout_s: float, version: str = ""
    ) -> np.ndarray:
        return model.kind.noop_output(tensors)
