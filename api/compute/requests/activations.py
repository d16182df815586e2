"""The activations a cross-encoder's scores get, as ``CrossEncoder.predict`` applies them to
its logits (``activation_fn``: a sigmoid for one label, nothing for several, unless the model
names another), in numpy: the gateway applies them, so a request may also have the logits
as they are (``raw_scores``), or as TEI gives them (a softmax over several labels, a
sigmoid for one). A test keeps the names in step with the contract's ``GATEWAY_ACTIVATIONS``."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def _sigmoid(logits: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-logits.astype(np.float64)))).astype(np.float32)


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return (exp / exp.sum(axis=-1, keepdims=True)).astype(np.float32)


SIGMOID = "torch.nn.modules.activation.Sigmoid"
SOFTMAX = "torch.nn.modules.activation.Softmax"
# The activation's class (as metadata.json names it) -> the function over [inputs, labels].
ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    SIGMOID: _sigmoid,
    "torch.nn.modules.linear.Identity": lambda logits: logits.astype(np.float32),
    "torch.nn.modules.activation.Tanh": lambda logits: np.tanh(logits).astype(np.float32),
    SOFTMAX: _softmax,
}
