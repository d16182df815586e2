"""Exporting a module stack: transformers' vmap-built attention masks are built by indices
for the trace (EmbeddingGemma's bidirectional Gemma 3), and an export that fails says which
architecture, module chain and operator or library code stopped it, and what to try."""

from __future__ import annotations

import pytest

from embedgate.contract.errors import UnsupportedModelError
from embedgate.converters.library import module_stack


@pytest.fixture(scope="module")
def masks():
    from transformers import masking_utils

    return masking_utils


def test_masks_are_built_without_vmap_inside_and_as_before_after(masks):
    registry = masks.ALL_MASK_ATTENTION_FUNCTIONS
    before = registry["sdpa"]
    seen = []

    def sdpa(*args, use_vmap=False, **kwargs):
        seen.append(use_vmap)

    registry["sdpa"] = sdpa
    try:
        with module_stack.index_based_masks():
            registry["sdpa"](use_vmap=True)
        assert seen == [False]
        assert registry["sdpa"] is sdpa  # the model's own registrations come back
    finally:
        del registry["sdpa"]
    assert registry["sdpa"] is before


class Transformer:
    class auto_model:  # noqa: N801 - stands in for a transformers model
        class config:  # noqa: N801
            architectures = ["Gemma3TextModel"]
            model_type = "gemma3_text"


class Pooling:
    pass


def failing_in_transformers(filename: str = "/x/transformers/models/gemma3/modeling_gemma3.py"):
    """An error raised from a frame whose file is ``filename`` (transformers' model code)."""
    code = compile("def forward():\n    raise RuntimeError('unordered_map::at')\n", filename, "exec")
    namespace: dict = {}
    exec(code, namespace)
    try:
        namespace["forward"]()
    except RuntimeError as error:
        return error


def test_a_failed_export_names_the_architecture_the_modules_and_where_it_stopped():
    error = module_stack.export_failure(failing_in_transformers(), [Transformer(), Pooling()])
    assert isinstance(error, UnsupportedModelError)
    message = str(error)
    assert "Gemma3TextModel transformer (Transformer -> Pooling)" in message
    assert "transformers/models/gemma3/modeling_gemma3.py (forward, line 2)" in message
    assert "RuntimeError: unordered_map::at" in message and "What to try" in message


def test_an_export_that_stops_in_the_models_own_code_says_so_and_what_must_hold():
    own = "/home/x/.cache/huggingface/modules/transformers_modules/model/modeling_tiny_rotary.py"
    message = str(module_stack.export_failure(failing_in_transformers(own), [Transformer(), Pooling()]))
    assert "tracing stopped in the model's own code, modeling_tiny_rotary.py (forward, line 2)" in message
    assert "its code must trace" in message and "models with their own code" in message


def test_an_operator_the_exporter_lacks_is_named():
    error = RuntimeError("Exporting the operator 'aten::fft_rfft' to ONNX opset version 17 is not supported.")
    message = str(module_stack.export_failure(error, [Transformer()]))
    assert "no conversion of operator aten::fft_rfft" in message and "opset 17" in message


def test_padding_becomes_the_models_own_pad_id_where_the_mask_is_0():
    import torch

    ids = torch.tensor([[5, 6, 0, 0], [7, 0, 8, 9]])
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    # A real token that happens to be 0 stays 0: only padding is rewritten.
    assert module_stack.padded_with(ids, mask, 42).tolist() == [[5, 6, 42, 42], [7, 0, 8, 9]]
