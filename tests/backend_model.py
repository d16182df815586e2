"""The Python-backend model run in-process: a stand-in for Triton's
``triton_python_backend_utils``, and a tiny ONNX graph with the published signature.

Its fixtures are offered to every test package through ``tests/conftest.py``.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import types
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from embedgate.bench.served_model import FINAL_FLAG, PB_UTILS, InferenceResponse, Tensor, stand_in

BACKEND_MODEL = Path(__file__).resolve().parents[1] / "python_backend" / "model.py"


# --- a stand-in for triton_python_backend_utils (the benchmark's), with response senders ---


class FakeResponseSender:
    """What a decoupled model's answers go through: records each response and its flags."""

    def __init__(self):
        self.sent: list[tuple[InferenceResponse, int]] = []
        self.done = threading.Event()

    def send(self, response=None, flags: int = 0) -> None:
        self.sent.append((response, flags))
        if flags & FINAL_FLAG:
            self.done.set()


class FakeInferenceRequest:
    def __init__(self, **inputs: np.ndarray):
        self.inputs = [Tensor(name, array) for name, array in inputs.items()]
        self.sender = FakeResponseSender()

    def get_response_sender(self) -> FakeResponseSender:
        return self.sender


@pytest.fixture
def fake_pb_utils(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = stand_in()
    monkeypatch.setitem(sys.modules, PB_UTILS, module)
    return module


@pytest.fixture
def make_request():
    """``make_request(input_ids=..., attention_mask=...)``: a request as model.py receives it."""
    return FakeInferenceRequest


@pytest.fixture
def load_python_model(fake_pb_utils, monkeypatch: pytest.MonkeyPatch):
    """Import a model.py (the backend model by default) as Triton's Python stub would,
    with the modules the converter copies beside it importable."""
    monkeypatch.syspath_prepend(str(BACKEND_MODEL.parent))

    def load(path: Path = BACKEND_MODEL) -> types.ModuleType:
        spec = importlib.util.spec_from_file_location(f"triton_model_{abs(hash(path))}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


# --- a tiny ONNX graph with the published signature ---


@dataclass
class TinyOnnx:
    path: Path  # <model dir>/1/model.onnx
    table: np.ndarray  # [vocab, dim] embedding table


def mean_pool_graph(table: np.ndarray):
    """embedding = sum(table[ids] * mask) / sum(mask): pooling under the mask, like the real graphs."""
    from onnx import TensorProto, checker, helper, numpy_helper

    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["tokens"]),
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask_f", "last_axis"], ["mask_3d"]),
        helper.make_node("Mul", ["tokens", "mask_3d"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "seq_axis"], ["summed"], keepdims=0),
        helper.make_node("ReduceSum", ["mask_3d", "seq_axis"], ["count"], keepdims=0),
        helper.make_node("Max", ["count", "epsilon"], ["safe_count"]),
        helper.make_node("Div", ["summed", "safe_count"], ["embedding"]),
    ]
    initializers = [
        numpy_helper.from_array(table, "table"),
        numpy_helper.from_array(np.array([2], dtype=np.int64), "last_axis"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "seq_axis"),
        numpy_helper.from_array(np.array([1e-9], dtype=np.float32), "epsilon"),
    ]
    graph = helper.make_graph(
        nodes,
        "mean_pool",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"]),
        ],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", table.shape[1]])],
        initializers,
    )
    # IR 8 is opset 17's; newer onnx writes an IR version onnxruntime may not read yet.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    checker.check_model(model)
    return model


@pytest.fixture
def mean_pool_onnx(tmp_path: Path) -> TinyOnnx:
    import onnx

    table = np.random.default_rng(0).normal(size=(50, 8)).astype(np.float32)
    path = tmp_path / "tiny" / "1" / "model.onnx"
    path.parent.mkdir(parents=True)
    onnx.save(mean_pool_graph(table), str(path))
    return TinyOnnx(path, table)
