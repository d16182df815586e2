from __future__ import annotations

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from embedgate.contract.spec import (
    ATTENTION_MASK,
    EMBEDDING,
    INPUT_IDS,
    ONNX_FILE,
    TORCH_FILE,
    ConversionSpec,
    TritonConfigOptions,
)
from embedgate.converters.triton_config import (
    BATCH_THREADS_PARAMETER,
    INTER_OP_PARAMETER,
    INTRA_OP_PARAMETER,
    ONNX_FILE_PARAMETER,
    PACK_WIDTH_PARAMETER,
    build_clip_image_config,
    build_text_model_config,
    render,
)


def rendered_and_parsed(options: TritonConfigOptions, dim: int = 384) -> pb.ModelConfig:
    text = render(build_text_model_config("minilm", EMBEDDING, dim, options))
    return text_format.Parse(text, pb.ModelConfig())


def test_python_form_has_ragged_inputs_and_python_backend():
    config = rendered_and_parsed(TritonConfigOptions(form="python", max_batch_size=32))

    assert config.name == "minilm"
    assert config.backend == "python"
    assert config.platform == ""
    assert config.default_model_filename == ""
    assert config.max_batch_size == 32
    assert [(i.name, i.data_type, list(i.dims), i.allow_ragged_batch) for i in config.input] == [
        (INPUT_IDS, pb.TYPE_INT64, [-1], True),
        (ATTENTION_MASK, pb.TYPE_INT64, [-1], True),
    ]
    assert [(o.name, o.data_type, list(o.dims)) for o in config.output] == [(EMBEDDING, pb.TYPE_FP32, [384])]
    assert config.parameters[ONNX_FILE_PARAMETER].string_value == ONNX_FILE
    assert config.parameters[PACK_WIDTH_PARAMETER].string_value == "48"


def test_onnxruntime_form_uses_native_platform_without_ragged_inputs():
    config = rendered_and_parsed(TritonConfigOptions(form="onnxruntime", instance_kind="gpu", instance_count=2))

    assert config.platform == "onnxruntime_onnx"
    assert config.backend == ""
    assert config.default_model_filename == ONNX_FILE
    assert [i.name for i in config.input] == [INPUT_IDS, ATTENTION_MASK]
    assert not any(i.allow_ragged_batch for i in config.input)
    assert all(list(i.dims) == [-1] and i.data_type == pb.TYPE_INT64 for i in config.input)
    assert [(g.kind, g.count) for g in config.instance_group] == [(pb.ModelInstanceGroup.KIND_GPU, 2)]
    assert ONNX_FILE_PARAMETER not in config.parameters
    assert PACK_WIDTH_PARAMETER not in config.parameters


@pytest.mark.parametrize("form", ["python", "onnxruntime"])
def test_dynamic_batching_and_queue_policy(form):
    options = TritonConfigOptions(
        form=form,
        max_batch_size=64,
        max_queue_delay_microseconds=1500,
        preferred_batch_sizes=[16, 32],
        max_queue_size=256,
        queue_timeout_microseconds=250_000,
    )
    batching = rendered_and_parsed(options).dynamic_batching

    assert batching.max_queue_delay_microseconds == 1500
    assert list(batching.preferred_batch_size) == [16, 32]
    policy = batching.default_queue_policy
    assert policy.timeout_action == pb.ModelQueuePolicy.REJECT
    assert policy.default_timeout_microseconds == 250_000
    assert policy.allow_timeout_override is True
    assert policy.max_queue_size == 256


def test_without_dynamic_batching_the_config_has_no_batcher():
    config = rendered_and_parsed(TritonConfigOptions(max_batch_size=64, dynamic_batching=False))
    assert not config.HasField("dynamic_batching")
    assert config.max_batch_size == 64  # requests still carry many rows


def test_cpu_instances_are_workers_of_one_decoupled_instance_and_thread_parameters():
    options = TritonConfigOptions(instance_count=3, intra_op_threads=2, inter_op_threads=1)
    config = rendered_and_parsed(options)

    # One stub process and one onnxruntime session run three batches at once.
    assert [(g.kind, g.count) for g in config.instance_group] == [(pb.ModelInstanceGroup.KIND_CPU, 1)]
    assert config.model_transaction_policy.decoupled
    assert config.parameters[BATCH_THREADS_PARAMETER].string_value == "3"
    assert config.parameters[INTRA_OP_PARAMETER].string_value == "2"
    assert config.parameters[INTER_OP_PARAMETER].string_value == "1"


def test_rendering_is_text_format_not_defaults():
    text = render(build_text_model_config("minilm", EMBEDDING, 384, TritonConfigOptions()))

    assert 'backend: "python"' in text
    assert "allow_ragged_batch: true" in text
    assert "platform" not in text


def test_python_form_on_gpu_runs_the_torchscript_graph_without_packing():
    config = build_text_model_config(
        "m", EMBEDDING, 8, TritonConfigOptions(form="python", instance_kind="gpu", instance_count=2)
    )

    assert config.backend == "python"
    # Triton sees CPU instances; model.py puts the graph on the GPU.
    assert config.instance_group[0].kind == pb.ModelInstanceGroup.KIND_CPU
    assert config.instance_group[0].count == 2
    assert not config.model_transaction_policy.decoupled
    assert BATCH_THREADS_PARAMETER not in config.parameters
    assert config.parameters["torch_file"].string_value == TORCH_FILE
    assert config.parameters["torch_device"].string_value == "cuda"
    assert config.parameters["pack_width"].string_value == "0"
    assert all(i.allow_ragged_batch for i in config.input)


def test_python_form_on_cpu_names_no_torchscript_graph():
    config = build_text_model_config("m", EMBEDDING, 8, TritonConfigOptions(form="python"))

    assert "torch_file" not in config.parameters
    assert config.instance_group[0].kind == pb.ModelInstanceGroup.KIND_CPU


def test_gpu_instances_of_the_python_form_are_for_models_without_a_variant():
    with pytest.raises(ValueError, match="run on CPU instances"):
        ConversionSpec(
            model_name="m", triton_name="m", repository="/r", triton=TritonConfigOptions(instance_kind="gpu"),
            variant="int8",
        )
    # OpenCLIP towers are traced for the GPU too; the native form's GPU instances run the ONNX file: any model.
    ConversionSpec(
        model_name="m", triton_name="m", repository="/r", triton=TritonConfigOptions(instance_kind="gpu"),
        library="open_clip",
    )
    ConversionSpec(
        model_name="m", triton_name="m", repository="/r",
        triton=TritonConfigOptions(form="onnxruntime", instance_kind="gpu"), variant="int8",
    )


def test_gpu_text_models_capture_graphs_of_batch_sizes_up_to_the_largest_and_widths_up_to_the_longest():
    options = TritonConfigOptions(
        instance_kind="gpu", max_batch_size=100, graph_rows=[1, 8, 64, 256], graph_widths=[16, 64, 512],
        graph_max_tokens=4096,
    )
    config = build_text_model_config("m", EMBEDDING, 8, options, max_width=128)

    assert config.parameters["graph_rows"].string_value == "1,8,64,100"
    assert config.parameters["graph_widths"].string_value == "16,64,128"
    assert config.parameters["graph_max_tokens"].string_value == "4096"
    # No widths, no graphs (text is ragged); CLIP towers have fixed shapes: rows only.
    eager = build_text_model_config("m", EMBEDDING, 8, options.model_copy(update={"graph_widths": []}), max_width=128)
    assert (eager.parameters["graph_rows"].string_value, eager.parameters["graph_widths"].string_value) == ("", "")
    image = build_clip_image_config("c", 32, 32, 8, options)
    assert image.parameters["torch_file"].string_value == TORCH_FILE
    assert (image.parameters["graph_rows"].string_value, image.parameters["graph_widths"].string_value) == ("1,8,64,100", "")
    assert "graph_rows" not in build_clip_image_config("c", 32, 32, 8, TritonConfigOptions()).parameters


def test_preferred_batch_size_above_max_is_refused():
    with pytest.raises(ValueError, match="max_batch_size"):
        build_text_model_config("m", EMBEDDING, 8, TritonConfigOptions(max_batch_size=8, preferred_batch_sizes=[16]))
