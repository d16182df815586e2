"""Dynamic int8 quantization that keeps in float32 the few MatMuls it hurts most.

onnxruntime's dynamic quantization stores a MatMul's weights as int8 (one scale per output
channel) and quantizes its input to uint8 at run time with ONE scale for the whole tensor,
so an input with a few large channels loses the resolution of all the others. In BERT-like
encoders that happens in some feed-forward layers: with every MatMul quantized,
all-MiniLM-L6-v2 falls to a minimum cosine of about 0.98 against PyTorch, while most
MatMuls cost almost nothing. So:

1. a copy of the graph in which a graph input switches each weight MatMul between float32
   and simulated int8 (an ``If`` whose int8 branch runs ``DynamicQuantizeLinear`` and
   ``DequantizeLinear`` on its input and uses per-channel int8 weights) lets ONE
   onnxruntime session measure each MatMul's harm alone;
2. the most harmful are kept in float32, one at a time, until the simulated model reaches
   the target on the parity sentences (:func:`choose_float32`);
3. ``quantize_dynamic`` writes the real graph (:func:`quantize`), which the caller measures
   again: the simulation ranks, the real graph decides.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from embedgate.contract.spec import EMBEDDING
from embedgate.converters.library import parity

Step = Callable[[str], None]

SWITCH_PREFIX = "embedgate_int8_switch_"


@dataclass(frozen=True)
class Float32Choice:
    """Which weight MatMuls stay float32: the simulation's choice, which the real graph
    may widen (``variants.py``)."""

    # Weight MatMul names, the most harmful to quantize first.
    ranked: list[str]
    # How many of ranked[] stay float32 for the simulated model to reach the target.
    keep_float32: int
    simulated_min_cosine: float


def weight_matmuls(model) -> list[int]:
    """Positions in the graph of the MatMuls whose second input is a float32 weight matrix
    (what gets quantized); unnamed ones are left out, as quantize_dynamic could not be told
    to keep them in float32."""
    from onnx import TensorProto

    weights = {
        init.name
        for init in model.graph.initializer
        if init.data_type == TensorProto.FLOAT and len(init.dims) == 2
    }
    return [
        position
        for position, node in enumerate(model.graph.node)
        if node.op_type == "MatMul" and node.name and node.input[1] in weights
    ]


def int8_per_channel(weights: np.ndarray) -> np.ndarray:
    """What symmetric int8 quantization with one scale per output column leaves of ``weights``."""
    scale = np.abs(weights).max(axis=0, keepdims=True) / 127.0
    scale[scale == 0] = 1.0
    return (np.clip(np.round(weights / scale), -127, 127) * scale).astype(np.float32)


def _simulation_graph(model, positions: list[int]) -> list[str]:
    """Rewrite ``model`` in place: the MatMul at each of ``positions`` becomes an ``If`` on a
    boolean scalar input, whose branches are the float32 MatMul and its simulated int8
    version, so a run computes exactly one of the two. Returns the switch names."""
    from onnx import NodeProto, TensorProto, helper, numpy_helper

    initializers = {init.name: init for init in model.graph.initializer}
    switches, replaced = [], {}
    for index, position in enumerate(positions):
        node = model.graph.node[position]
        switch = f"{SWITCH_PREFIX}{index}"
        switches.append(switch)
        model.graph.input.append(helper.make_tensor_value_info(switch, TensorProto.BOOL, []))
        activation, weight_name = node.input[0], node.input[1]
        weights = numpy_helper.to_array(initializers[weight_name])
        t = f"{switch}_"  # names of this MatMul's new tensors
        model.graph.initializer.append(numpy_helper.from_array(int8_per_channel(weights), t + "weight"))
        int8_branch = helper.make_graph(
            [
                helper.make_node("DynamicQuantizeLinear", [activation], [t + "q", t + "scale", t + "zero"]),
                helper.make_node("DequantizeLinear", [t + "q", t + "scale", t + "zero"], [t + "input"]),
                helper.make_node("MatMul", [t + "input", t + "weight"], [t + "int8"]),
            ],
            t + "int8_branch",
            [],
            [helper.make_tensor_value_info(t + "int8", TensorProto.FLOAT, None)],
        )
        float32_branch = helper.make_graph(
            [helper.make_node("MatMul", [activation, weight_name], [t + "float32"])],
            t + "float32_branch",
            [],
            [helper.make_tensor_value_info(t + "float32", TensorProto.FLOAT, None)],
        )
        replaced[position] = helper.make_node(
            "If", [switch], [node.output[0]], name=node.name, then_branch=int8_branch, else_branch=float32_branch
        )
    nodes = []
    for position, node in enumerate(model.graph.node):
        copy = NodeProto()
        copy.CopyFrom(replaced.get(position, node))  # the originals go with the field's old contents
        nodes.append(copy)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return switches


class Simulator:
    """One session over the switchable graph: embeddings with any set of MatMuls in int8."""

    def __init__(self, fp32_file: Path, work_dir: Path):
        import onnx
        import onnxruntime as ort

        model = onnx.load(str(fp32_file))
        positions = weight_matmuls(model)
        self.names = [model.graph.node[position].name for position in positions]
        self._switches = _simulation_graph(model, positions)
        # External data: the doubled weights of a large model would overflow one protobuf.
        path = work_dir / "int8-simulation.onnx"
        onnx.save(model, str(path), save_as_external_data=True, location=path.name + ".data")
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        self._session = ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])

    def runner(self, quantized: set[str]) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
        """Embeddings of one padded batch with the MatMuls named in ``quantized`` in int8."""
        switches = {switch: np.array(name in quantized) for switch, name in zip(self._switches, self.names)}
        return lambda feeds: self._session.run([EMBEDDING], {**feeds, **switches})[0]


def choose_float32(
    simulator: Simulator,
    token_ids: list[list[int]],
    reference: np.ndarray,
    target: float,
    max_float32: int,
    step: Step,
) -> Float32Choice:
    """Rank the MatMuls by the harm each does alone, then keep the worst in float32 until
    the simulated model reaches ``target`` in every parity check (or ``max_float32`` are
    kept)."""
    names = simulator.names
    step(f"measuring the effect of int8 on each of {len(names)} MatMuls (simulated)")
    # Sentences one by one first: a padded batch computes every sentence at the longest
    # one's length, so it is run only for a selection that passes alone.
    alone = [parity.pad([ids]) for ids in token_ids]
    batch = parity.pad(token_ids)

    def min_cosine_alone(run) -> float:
        return float(parity.cosines(np.concatenate([run(feeds) for feeds in alone]), reference).min())

    def harm(name: str) -> float:
        return 1.0 - min_cosine_alone(simulator.runner({name}))

    def score(keep: int) -> float:
        run = simulator.runner(set(ranked[keep:]))
        achieved = min_cosine_alone(run)
        if achieved < target:
            return achieved
        return min(achieved, float(parity.cosines(run(batch), reference).min()))

    harms = {name: harm(name) for name in names}
    ranked = sorted(names, key=harms.__getitem__, reverse=True)
    keep, achieved = 0, score(0)
    while achieved < target and keep < max_float32:
        keep += 1
        achieved = score(keep)
    step(f"simulated: min cosine {achieved:.6f} with {keep} of {len(names)} MatMuls in float32")
    return Float32Choice(ranked, keep, achieved)


def quantize(fp32_file: Path, out_file: Path, keep_float32: list[str]) -> None:
    """``quantize_dynamic``: int8 weights per output channel, uint8 inputs quantized at run
    time; only weight MatMuls (an int8 embedding table costs accuracy and no compute)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # Its advice to pre-process first (logged on the root logger) is about static quantization.
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        quantize_dynamic(
            str(fp32_file),
            str(out_file),
            op_types_to_quantize=["MatMul"],
            per_channel=True,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=keep_float32,
            # The exporter's graph leaves some MatMul outputs without an inferred type.
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
    finally:
        root.setLevel(level)
