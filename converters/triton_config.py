"""config.pbtxt for a published model, built as a ``ModelConfig`` protobuf.

Two forms share one ONNX file and one I/O signature (see ``TritonConfigOptions.form``):

- ``python``: Triton's Python backend runs ``python_backend/model.py``, which pads the
  requests of a dynamic batch itself (onnxruntime on CPU instances; on GPU instances,
  sentence-transformers models only, PyTorch runs the TorchScript graph
  ``converters/library/gpu.py`` traced). Inputs are ragged so that Triton batches requests of
  different sequence lengths together (without it, only equal lengths batch).
- ``onnxruntime``: Triton's native ONNX Runtime backend. It cannot pad ragged inputs, so the
  gateway pads to sequence-length buckets and requests of one bucket batch together.

A CLIP model is two such models. Their inputs have fixed shapes (token ids of the context
length; uint8 pixels of the image size), so both forms batch any requests together.
"""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from embedgate.contract.spec import (
    ATTENTION_MASK,
    EMBEDDING,
    INPUT_IDS,
    ONNX_FILE,
    PIXELS,
    TORCH_FILE,
    TritonConfigOptions,
)

TEXT_INPUTS = (INPUT_IDS, ATTENTION_MASK)

# Parameter names follow Triton's native onnxruntime backend, so both forms read the same keys.
INTRA_OP_PARAMETER = "intra_op_thread_count"
INTER_OP_PARAMETER = "inter_op_thread_count"
# Python form, CPU: the batches one instance's model.py runs at once, one thread each (a
# "worker" is a gateway process: EMBEDGATE_WORKERS).
BATCH_THREADS_PARAMETER = "batch_threads"
# Tells the Python-backend model.py which file in the version directory to open.
ONNX_FILE_PARAMETER = "onnx_file"
# Python form, text models: the input whose non-zero count is a row's real length, the
# most rows per onnxruntime run once a batch's rows are sorted by that length, and the
# fixed cost of a run (in padded tokens) that decides where the runs are cut.
LENGTH_INPUT_PARAMETER = "length_input"
SUB_BATCH_PARAMETER = "sub_batch_size"
RUN_OVERHEAD_PARAMETER = "run_overhead_tokens"
# Python form, text models: texts laid end to end in rows this wide through the packed graph.
PACK_WIDTH_PARAMETER = "pack_width"
# Python form, GPU instances: the TorchScript graph model.py runs with PyTorch, and where.
TORCH_FILE_PARAMETER = "torch_file"
TORCH_DEVICE_PARAMETER = "torch_device"
# ... and the shapes it captures as CUDA graphs (python_backend/torch_graphs.py).
GRAPH_ROWS_PARAMETER = "graph_rows"
GRAPH_WIDTHS_PARAMETER = "graph_widths"
GRAPH_TOKENS_PARAMETER = "graph_max_tokens"


def validate_options(options: TritonConfigOptions) -> None:
    """Refuse option combinations Triton would only reject at load time."""
    too_large = [size for size in options.preferred_batch_sizes if size > options.max_batch_size]
    if too_large:
        raise ValueError(
            f"preferred batch sizes {too_large} exceed max_batch_size {options.max_batch_size}"
        )


def build_text_model_config(
    name: str,
    output_name: str,
    output_dim: int,
    options: TritonConfigOptions,
    input_names: tuple[str, ...] = TEXT_INPUTS,
    *,
    versions: Sequence[int] = (1,),
    per_token: bool = False,
    length_input: str | None = ATTENTION_MASK,
    max_width: int | None = None,
) -> pb.ModelConfig:
    """A sentence-transformers graph: token tensors of one length per request (ragged in the
    python form) in, ``output_name`` [output_dim] per text (or pair) out, or [tokens,
    output_dim] ``per_token``. ``versions``: one graph per route of a model with a Router,
    every one loaded. ``length_input``: the input whose non-zero count is a row's length (for
    length-sorted runs); None where a row reaches past its attention mask (a multi-vector
    query's expansion tokens, which the encoder does not attend to but which are scored).
    ``max_width``: the most tokens a row has (GPU instances capture no wider graphs)."""
    dims = [-1, output_dim] if per_token else [output_dim]
    config = _model_config(name, output_name, dims, options)
    if list(versions) != [1]:
        config.version_policy.specific.versions.extend(versions)
    python_form = options.form == "python"
    for input_name in input_names:
        config.input.add(name=input_name, data_type=pb.TYPE_INT64, dims=[-1], allow_ragged_batch=python_form)
    if python_form:
        if length_input is not None:
            config.parameters[LENGTH_INPUT_PARAMETER].string_value = length_input
        config.parameters[SUB_BATCH_PARAMETER].string_value = str(options.sub_batch_size)
        config.parameters[RUN_OVERHEAD_PARAMETER].string_value = f"{options.run_overhead_tokens:g}"
        gpu = options.instance_kind == "gpu"
        # The packed graph is an onnxruntime one; GPU instances run the TorchScript graph.
        config.parameters[PACK_WIDTH_PARAMETER].string_value = "0" if gpu else str(options.pack_width)
        if gpu:
            _torch_parameters(config, options, max_width or max(options.graph_widths, default=0))
    return config


def _torch_parameters(config: pb.ModelConfig, options: TritonConfigOptions, max_width: int | None) -> None:
    """GPU instances of the python form: the TorchScript graph, and the CUDA graphs' buckets:
    the batch sizes up to max_batch_size (and it), the widths below ``max_width`` (and it;
    None: inputs of fixed shape). Text without widths: no graphs."""
    config.parameters[TORCH_FILE_PARAMETER].string_value = TORCH_FILE
    config.parameters[TORCH_DEVICE_PARAMETER].string_value = "cuda"
    rows = _up_to(options.graph_rows, options.max_batch_size)
    widths = _up_to(options.graph_widths, max_width) if max_width and rows else []
    if max_width is not None and not widths:
        rows = []
    config.parameters[GRAPH_ROWS_PARAMETER].string_value = ",".join(map(str, rows))
    config.parameters[GRAPH_WIDTHS_PARAMETER].string_value = ",".join(map(str, widths))
    config.parameters[GRAPH_TOKENS_PARAMETER].string_value = str(options.graph_max_tokens)


def _up_to(sizes: Sequence[int], largest: int) -> list[int]:
    """``sizes`` below ``largest``, then ``largest`` (none where ``sizes`` is empty: no graphs)."""
    return sorted({size for size in sizes if size < largest} | {largest}) if sizes else []


def build_clip_text_config(
    name: str, context_length: int, embedding_dim: int, options: TritonConfigOptions
) -> pb.ModelConfig:
    config = _model_config(name, EMBEDDING, embedding_dim, options)
    config.input.add(name=INPUT_IDS, data_type=pb.TYPE_INT64, dims=[context_length])
    if options.form == "python" and options.instance_kind == "gpu":
        _torch_parameters(config, options, None)
    return config


def build_clip_image_config(
    name: str, height: int, width: int, embedding_dim: int, options: TritonConfigOptions
) -> pb.ModelConfig:
    config = _model_config(name, EMBEDDING, embedding_dim, options)
    config.input.add(name=PIXELS, data_type=pb.TYPE_UINT8, dims=[height, width, 3])
    if options.form == "python" and options.instance_kind == "gpu":
        _torch_parameters(config, options, None)
    return config


def build_request_config(
    name: str,
    inputs: Sequence[tuple[str, int, list[int]]],
    output_name: str,
    output_dims: list[int],
    options: TritonConfigOptions,
) -> pb.ModelConfig:
    """A graph whose every request runs alone, its tensors as the gateway shaped them
    (``max_batch_size`` 0: whole shapes, no dynamic batching): a vision-language model's
    graphs, whose batches the gateway's coalescer makes (the language graph) or which take
    one image each (the vision graph). ``inputs``: (name, data type, whole dims) each. The
    python form only (the native backend cannot take an empty image-rows tensor)."""
    if options.form != "python":
        raise ValueError("a vision-language model is published in the python form only")
    config = _model_config(name, output_name, output_dims, options, batched=False)
    for input_name, data_type, dims in inputs:
        config.input.add(name=input_name, data_type=data_type, dims=dims)
    return config


def _model_config(
    name: str, output_name: str, output_dims: int | list[int], options: TritonConfigOptions, *, batched: bool = True
) -> pb.ModelConfig:
    """Everything but the inputs: backend, the one output, batching, instances (``batched``:
    Triton merges requests along a first dimension of its own, where the options say so)."""
    validate_options(options)
    config = pb.ModelConfig(name=name, max_batch_size=options.max_batch_size if batched else 0)
    python_form = options.form == "python"
    if python_form:
        config.backend = "python"
    else:
        config.platform = "onnxruntime_onnx"
        config.default_model_filename = ONNX_FILE
    dims = [output_dims] if isinstance(output_dims, int) else output_dims
    config.output.add(name=output_name, data_type=pb.TYPE_FP32, dims=dims)

    if options.dynamic_batching and batched:
        batching = config.dynamic_batching
        batching.max_queue_delay_microseconds = options.max_queue_delay_microseconds
        batching.preferred_batch_size.extend(options.preferred_batch_sizes)
        policy = batching.default_queue_policy
        policy.timeout_action = pb.ModelQueuePolicy.REJECT
        policy.default_timeout_microseconds = options.queue_timeout_microseconds
        policy.allow_timeout_override = True
        policy.max_queue_size = options.max_queue_size

    # Python form on a GPU: Triton sees CPU instances and model.py puts the graph on the GPU
    # itself (torch_device), so Triton needs no CUDA of its own (the bundled tritonserver
    # links CUDA 12.6, the host's PyTorch its own) and hands model.py host tensors, which it
    # pads and sorts before they go to the GPU. This is the form measured on an H200.
    gpu_kind = options.instance_kind == "gpu" and not python_form
    kind = pb.ModelInstanceGroup.KIND_GPU if gpu_kind else pb.ModelInstanceGroup.KIND_CPU
    parameters = {
        INTRA_OP_PARAMETER: str(options.intra_op_threads),
        INTER_OP_PARAMETER: str(options.inter_op_threads),
    }
    if python_form:
        parameters[ONNX_FILE_PARAMETER] = ONNX_FILE
    if python_form and options.instance_kind == "cpu":
        # One Triton instance (one stub process, one onnxruntime session, one copy of the
        # weights) whose model.py runs instance_count batches at once, each on a thread
        # of its own; decoupled, so that execute may return before its answers are sent.
        config.model_transaction_policy.decoupled = True
        config.instance_group.add(count=1, kind=kind)
        parameters[BATCH_THREADS_PARAMETER] = str(options.instance_count)
    else:
        config.instance_group.add(count=options.instance_count, kind=kind)
    for key, value in parameters.items():
        config.parameters[key].string_value = value
    return config


def render(config: pb.ModelConfig) -> str:
    return text_format.MessageToString(config)


def parse(text: str) -> pb.ModelConfig:
    return text_format.Parse(text, pb.ModelConfig())
