"""The backend that serves: Triton, through the gateway's async client, each call sent
again where Triton or the model's process died under it (``resend.py``)."""

from __future__ import annotations

import numpy as np

from ...triton.client import TritonClient
from ..requests.served import ServedModel
from . import resend
from .base import Tensors


class TritonBackend:
    def __init__(self, client: TritonClient, triton: resend.Restartable | None = None):
        self.client = client
        self.triton = triton
        # Set by the gateway: whoever loads models here (the registry, or a worker's primary).
        self.reload_lost: resend.ReloadLost | None = None

    async def infer(
        self, model: ServedModel, part: str, tensors: Tensors, output: str, *, timeout_s: float, version: str = ""
    ) -> np.ndarray:
        return await resend.surviving(
            lambda: self.client.infer(part, tensors, output, timeout_s=timeout_s, version=version),
            model.name,
            self.triton,
            self.reload_lost,
        )
