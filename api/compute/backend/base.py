"""The one interface between scheduling and what runs the model.

The embedding service decides what to send (which inputs, merged how, in which chunks,
within which deadline); a backend runs one call: a Triton model's input tensors in, its
output out. What it does when the model's process or the server dies under a call is the
backend's own business (Triton's: ``resend.py``)."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from ..requests.served import ServedModel

# A Triton model's input tensors, by name.
Tensors = dict[str, np.ndarray]


class Backend(Protocol):
    async def infer(
        self, model: ServedModel, part: str, tensors: Tensors, output: str, *, timeout_s: float, version: str = ""
    ) -> np.ndarray:
        """``model``'s Triton model ``part`` (at ``version``) on ``tensors``: its ``output``."""
        ...
