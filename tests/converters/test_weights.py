"""Weights moved beside the graph: the same model, a small graph file, a data file
onnxruntime maps, and a second rewrite that changes nothing."""

import numpy as np
import onnxruntime as ort

from embedgate.converters import weights
from tests.converters.fake_kinds import tiny_onnx


def run(graph, x):
    session = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def test_weights_move_beside_the_graph_and_the_model_computes_the_same(tmp_path):
    graph = tiny_onnx(tmp_path / "model.onnx", ("x",))
    x = np.random.default_rng(0).standard_normal((3, 32)).astype(np.float32)
    before, size = run(graph, x), graph.stat().st_size
    weights.externalize(graph)
    data = weights.data_file(graph)
    assert data.name == "model.onnx.data" and data.stat().st_size >= 32 * 32 * 4
    assert graph.stat().st_size < 1024 < size  # the weights (4 KB) left the graph
    assert data.stat().st_mode & 0o777 == 0o644
    np.testing.assert_array_equal(run(graph, x), before)
    assert abs(weights.size_bytes(graph) - size) < 4096

    # Again (a graph that already has its weights beside it): the same files, not appended to.
    data_bytes = data.read_bytes()
    weights.externalize(graph)
    assert data.read_bytes() == data_bytes
    np.testing.assert_array_equal(run(graph, x), before)
