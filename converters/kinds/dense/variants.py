"""Load-time variants of a sentence-transformer model, each published as its own model.

- ``optimized``: onnxruntime's transformer optimizer fuses the float32 graph (attention
  into one ``Attention`` node, bias and GELU into ``BiasGelu``); it must keep the plain
  model's parity threshold (cosine 0.9999 against PyTorch).
- ``int8``: dynamic int8 quantization of the weight MatMuls (``converters/kinds/dense/int8.py``), with
  the few MatMuls that lose the most accuracy kept in float32; refused below its own
  threshold (0.99 by default). It quantizes the unfused graph: on this project's CPU
  measurements the fused graph's int8 form (``QAttention``) ran slower than the unfused
  one, whatever onnxruntime's general advice to fuse first.

Both are exported from the PyTorch model with its eager attention, whose ONNX pattern
onnxruntime's fusion recognizes (the SDPA export of the plain model it does not), and both
keep the plain model's inputs, output and dynamic axes, so the same config.pbtxt and
Python-backend model serve them. Everything here runs in the conversion subprocess.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from embedgate.contract.errors import ParityError
from embedgate.contract.spec import ConversionSpec, ParityResult, VariantInfo
from embedgate.converters import weights
from embedgate.converters.kinds.dense import int8
from embedgate.converters.library import parity

Step = Callable[[str], None]

# Fusions left out: measured on the 2-core CPU this project is benchmarked on (onnxruntime
# 1.31, one thread per instance, batches of 16 mixed 8-30-token sentences), graphs with
# EmbedLayerNormalization ran about 13% slower and with SkipLayerNormalization about 10%
# slower than with the plain LayerNormalization onnxruntime keeps when it opens a graph.
DISABLED_FUSIONS = ("enable_embed_layer_norm", "enable_skip_layer_norm", "enable_bias_skip_layer_norm")
# onnxruntime's basic optimizations (constant folding, redundant nodes) before the fusions:
# higher levels save layouts specific to the machine that converts.
FUSION_OPT_LEVEL = 1
# int8: MatMuls are kept in float32 until the simulated model, then the real one, is
# halfway from the threshold to a perfect cosine, so inputs beyond the parity sentences
# keep a margin.
INT8_HEADROOM = 0.5
# Beyond this share of MatMuls in float32 an int8 variant is not worth publishing.
MAX_FLOAT32_SHARE = 0.5


def prepare_export(model) -> None:
    """Export with the transformer's eager attention, the pattern the fusion recognizes
    (a model without that choice keeps its own attention; parity still decides)."""
    transformer = getattr(model[0], "auto_model", None)
    try:
        transformer.set_attn_implementation("eager")
    except (AttributeError, ValueError):
        pass


def attention_shape(model) -> tuple[int, int]:
    """(heads, hidden size) from the transformer's config; 0 lets the optimizer guess."""
    config = getattr(getattr(model[0], "auto_model", None), "config", None)
    return int(getattr(config, "num_attention_heads", 0) or 0), int(getattr(config, "hidden_size", 0) or 0)


def build(
    spec: ConversionSpec,
    model,
    work_dir: Path,
    onnx_file: Path,
    token_ids: list[list[int]],
    reference: np.ndarray,
    step: Step,
) -> tuple[ParityResult, VariantInfo]:
    """Turn the exported ``onnx_file`` into the variant ``spec.variant``, in place, and
    check it against the PyTorch ``reference``; raises ParityError below the threshold."""
    if spec.variant == "optimized":
        return _optimized(spec, model, onnx_file, token_ids, reference, step)
    if spec.variant == "int8":
        return _int8(spec, work_dir, onnx_file, token_ids, reference, step)
    raise ValueError(f"unknown variant {spec.variant!r}")


def fuse(onnx_file: Path, num_heads: int, hidden_size: int) -> dict[str, int]:
    """Fuse ``onnx_file`` in place for CPU; returns the fused operators and their counts."""
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    options = FusionOptions("bert")
    for fusion in DISABLED_FUSIONS:
        setattr(options, fusion, False)
    optimized = optimize_model(
        str(onnx_file),
        model_type="bert",
        num_heads=num_heads,
        hidden_size=hidden_size,
        opt_level=FUSION_OPT_LEVEL,
        use_gpu=False,
        optimization_options=options,
    )
    optimized.save_model_to_file(str(onnx_file))
    return {op: count for op, count in optimized.get_fused_operator_statistics().items() if count}


def _optimized(spec, model, onnx_file, token_ids, reference, step) -> tuple[ParityResult, VariantInfo]:
    heads, hidden = attention_shape(model)
    step(f"fusing the graph (onnxruntime transformer optimizer, {heads} heads, hidden size {hidden})")
    fused = fuse(onnx_file, heads, hidden)
    step("fused: " + (", ".join(f"{count} {op}" for op, count in sorted(fused.items())) or "nothing"))
    step(f"parity check of the fused graph on {len(token_ids)} sentences")
    result = parity.check_embeddings(onnx_file, token_ids, reference, spec.parity_threshold)
    return result, VariantInfo(name="optimized", onnx_bytes=weights.size_bytes(onnx_file), fused_operators=fused)


def _int8(spec, work_dir, onnx_file, token_ids, reference, step) -> tuple[ParityResult, VariantInfo]:
    threshold = spec.parity_threshold
    # Scratch files inside the staging directory, gone before anything is published.
    with tempfile.TemporaryDirectory(dir=work_dir, prefix=".int8-") as scratch:
        fp32_file = Path(scratch) / "float32.onnx"
        os.replace(onnx_file, fp32_file)
        simulator = int8.Simulator(fp32_file, Path(scratch))
        total = len(simulator.names)
        max_float32 = math.floor(total * MAX_FLOAT32_SHARE)
        target = 1.0 - (1.0 - threshold) * INT8_HEADROOM
        choice = int8.choose_float32(simulator, token_ids, reference, target, max_float32, step)
        del simulator  # its session holds a second copy of the weights
        keep = choice.keep_float32
        while True:
            step(f"quantizing {total - keep} MatMuls to int8, {keep} stay float32")
            int8.quantize(fp32_file, onnx_file, choice.ranked[:keep])
            result, worst = parity.measure_embeddings(onnx_file, token_ids, reference, threshold)
            step(f"int8 parity: min cosine {result.min_cosine:.6f}, mean {result.mean_cosine:.6f}")
            # The real graph keeps the margin too: on another CPU its int8 kernels round
            # differently from the simulation, and unseen inputs need the headroom.
            if result.min_cosine >= target or keep >= max_float32:
                break
            keep += 1
    if not result.passed:
        raise ParityError(
            f"int8 parity check failed: min cosine {result.min_cosine:.6f} < threshold {threshold} "
            f"({worst}) with {keep} of {total} MatMuls kept in float32 (at most {max_float32})"
        )
    return result, VariantInfo(
        name="int8",
        onnx_bytes=weights.size_bytes(onnx_file),
        int8_matmuls=total - keep,
        float32_matmuls=choice.ranked[:keep],
    )
