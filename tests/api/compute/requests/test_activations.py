"""The activations the gateway applies to a cross-encoder's logits, as torch computes them."""

from __future__ import annotations

import numpy as np
import pytest

from embedgate.api.compute.requests.activations import ACTIVATIONS
from embedgate.contract.spec import GATEWAY_ACTIVATIONS


def test_the_gateway_applies_every_activation_the_contract_lets_a_graph_leave_to_it():
    assert set(ACTIVATIONS) == set(GATEWAY_ACTIVATIONS)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_each_activation_is_torchs(name):
    import torch

    module, _, cls = name.rpartition(".")
    activation = getattr(torch.nn, cls)(dim=-1) if cls == "Softmax" else getattr(torch.nn, cls)()
    assert f"{type(activation).__module__}.{type(activation).__qualname__}" == name
    logits = np.random.default_rng(0).normal(scale=4, size=(5, 3)).astype(np.float32)
    np.testing.assert_allclose(ACTIVATIONS[name](logits), activation(torch.from_numpy(logits)).numpy(), atol=1e-6)
