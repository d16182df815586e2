"""A Triton config gives a graph the inputs the graph declares: one it does not read is
taken out of the config (and so never sent), one it reads that the config does not give
refuses the conversion; each version's graph must read the same."""

from __future__ import annotations

import pytest
from tritonclient.grpc import model_config_pb2 as pb

from embedgate.contract.errors import ConversionError
from embedgate.converters.graph_inputs import fitted, recorded


def save_graph(path, inputs: list[str]) -> None:
    """An ONNX graph that adds its int64 ``inputs`` (each read) into one output."""
    import onnx
    from onnx import TensorProto, helper

    values = [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "length"]) for name in inputs]
    nodes, last = [], inputs[0]
    for index, name in enumerate(inputs[1:]):
        nodes.append(helper.make_node("Add", [last, name], [f"sum{index}"]))
        last = f"sum{index}"
    nodes.append(helper.make_node("Identity", [last], ["output"]))
    output = helper.make_tensor_value_info("output", TensorProto.INT64, ["batch", "length"])
    model = helper.make_model(helper.make_graph(nodes, "g", values, [output]), opset_imports=[helper.make_opsetid("", 17)])
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def config_of(*names: str) -> pb.ModelConfig:
    config = pb.ModelConfig(name="org--model")
    for name in names:
        config.input.add(name=name, data_type=pb.TYPE_INT64, dims=[-1])
    return config


def test_an_input_the_graph_does_not_read_leaves_the_config(tmp_path):
    save_graph(tmp_path / "1" / "model.onnx", ["input_ids", "attention_mask"])
    config = config_of("input_ids", "attention_mask", "token_type_ids")
    assert fitted("org--model", tmp_path, config) == ["input_ids", "attention_mask"]
    assert [value.name for value in config.input] == ["input_ids", "attention_mask"]


def test_the_configs_order_is_kept_and_every_route_version_is_read(tmp_path):
    save_graph(tmp_path / "1" / "model.onnx", ["attention_mask", "input_ids"])
    save_graph(tmp_path / "2" / "model.onnx", ["input_ids", "attention_mask"])
    config = config_of("input_ids", "attention_mask")
    assert recorded(["org--model"], [tmp_path], [config]) == {"org--model": ["input_ids", "attention_mask"]}
    save_graph(tmp_path / "3" / "model.onnx", ["input_ids"])
    with pytest.raises(ConversionError, match="graphs read different inputs"):
        fitted("org--model", tmp_path, config)


def test_an_input_the_gateway_does_not_give_refuses_the_conversion(tmp_path):
    save_graph(tmp_path / "1" / "model.onnx", ["input_ids", "position_ids"])
    with pytest.raises(ConversionError, match="reads position_ids, which the gateway does not give"):
        fitted("org--model", tmp_path, config_of("input_ids", "attention_mask"))


def test_a_model_without_an_onnx_graph_keeps_its_configs_inputs(tmp_path):
    (tmp_path / "1").mkdir()
    assert fitted("org--model", tmp_path, config_of("input_ids", "attention_mask")) == ["input_ids", "attention_mask"]
