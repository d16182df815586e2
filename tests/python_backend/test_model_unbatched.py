"""python_backend/model.py for a model without batching (``max_batch_size`` 0: a
vision-language model's graphs, published by ``build_request_config``): each request runs
alone with its tensors as sent, an empty one (no image rows) included; a malformed one is
answered with its own error."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as pb

from embedgate.contract.spec import TritonConfigOptions
from embedgate.converters import triton_config
from tests.backend_model import FINAL_FLAG

HIDDEN = 4


@pytest.fixture
def unbatched(tmp_path, load_python_model):
    """A graph of the language graph's form: ``embedding [batch, HIDDEN]`` = each row's id sum
    plus the sum of every image row (any number of them, none included)."""
    import torch

    class Graph(torch.nn.Module):
        def forward(self, input_ids, image_embeds):
            rows = input_ids.sum(1, keepdim=True).to(torch.float32)
            return rows.expand(-1, HIDDEN) + image_embeds.sum(0, keepdim=True)

    onnx_file = tmp_path / "1" / "model.onnx"
    onnx_file.parent.mkdir(parents=True)
    example = (torch.ones(2, 3, dtype=torch.int64), torch.ones(5, HIDDEN))
    torch.onnx.export(
        Graph(), example, str(onnx_file), input_names=["input_ids", "image_embeds"], output_names=["embedding"],
        dynamic_axes={"input_ids": {0: "b", 1: "l"}, "image_embeds": {0: "m"}, "embedding": {0: "b"}}, dynamo=False,
    )
    config = triton_config.build_request_config(
        "unbatched", [("input_ids", pb.TYPE_INT64, [-1, -1]), ("image_embeds", pb.TYPE_FP32, [-1, HIDDEN])],
        "embedding", [-1, HIDDEN], TritonConfigOptions(intra_op_threads=1, instance_count=2),
    )
    assert config.max_batch_size == 0 and not config.HasField("dynamic_batching")
    assert config.model_transaction_policy.decoupled
    instance = load_python_model().TritonPythonModel()
    instance.initialize({
        "model_config": json_format.MessageToJson(config, preserving_proto_field_name=True),
        "model_repository": str(tmp_path), "model_version": "1",
    })
    yield instance
    instance.finalize()


def final_answer(request, timeout=10.0):
    assert request.sender.done.wait(timeout), "no final response"
    [(response, flags)] = request.sender.sent
    assert flags == FINAL_FLAG
    return response


def test_each_request_runs_alone_with_its_tensors_as_sent(unbatched, make_request):
    ids = np.array([[1, 2, 3], [4, 5, 0]], dtype=np.int64)
    rows = np.arange(3 * HIDDEN, dtype=np.float32).reshape(3, HIDDEN)
    with_images = make_request(input_ids=ids, image_embeds=rows)
    texts = make_request(input_ids=ids[:1, :2], image_embeds=np.zeros((0, HIDDEN), np.float32))
    for request in (with_images, texts):
        assert unbatched.execute([request]) is None
    np.testing.assert_allclose(final_answer(with_images).output("embedding"), ids.sum(1, keepdims=True) + rows.sum(0))
    np.testing.assert_allclose(final_answer(texts).output("embedding"), np.full((1, HIDDEN), 3.0))


def test_a_malformed_request_gets_its_own_error(unbatched, make_request):
    flat = make_request(input_ids=np.ones(3, np.int64), image_embeds=np.zeros((0, HIDDEN), np.float32))
    narrow = make_request(input_ids=np.ones((1, 3), np.int64), image_embeds=np.zeros((2, HIDDEN + 1), np.float32))
    missing = make_request(input_ids=np.ones((1, 3), np.int64))
    for request in (flat, narrow, missing):
        unbatched.execute([request])
    assert final_answer(flat).error.message() == "input_ids must be [any, any], got shape [3]"
    assert final_answer(narrow).error.message() == f"image_embeds must be [any, {HIDDEN}], got shape [2, {HIDDEN + 1}]"
    assert final_answer(missing).error.message() == "input image_embeds is required"
