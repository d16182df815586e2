"""Triton Python-backend model: runs a published ONNX file with onnxruntime.

Copied as ``<model>/1/model.py``. The inputs and outputs are the ones the model's
config.pbtxt declares, so one file serves every model we publish: a sentence-transformer
(``input_ids`` and ``attention_mask``, ragged) and both towers of a CLIP model (token ids
of a fixed length; uint8 pixels). The well-formed requests of a dynamic batch are merged:
ragged inputs (``allow_ragged_batch``) arrive with each request's own ``[n_i, len_i]``
shape and are right-padded with 0 to the longest (id 0, mask 0: the graphs pool under the
mask, so padding does not change an embedding); fixed-shape inputs are concatenated.
Where the config names a ``length_input`` (text models), the merged rows are sorted by
their real length and run in sub-batches of at most ``sub_batch_size`` rows, each padded
only to its own longest row, cut where the padding saved outweighs the fixed cost of one
more onnxruntime run (``plan_sub_batches``), so a batch mixing short and long texts
computes little padding without paying for many small runs.
Where the model also has a packed graph (``model.packed.onnx``, sentence-transformers with
mean pooling), that graph is loaded instead of the plain one: a batch whose texts all fit
in ``pack_width`` tokens has them laid end to end in about equally full rows of at most
that width (``pack_rows``), each text attending to itself only, and runs with little
padding in as few runs as ``PACKED_RUN_TOKENS`` allows; other batches run as above, one
text per row.
Otherwise the batch is ONE onnxruntime call. Outputs are split back by ``n_i`` (a per-token
one also cut to each request's width); a malformed request gets its own error response.
Where the config makes the model decoupled (CPU models), one instance runs
``batch_threads`` batches at once, each on a thread of its own, through ONE onnxruntime
session (single-threaded runs, one copy of the weights and of the kernels' repacked
weights, whatever the count). ``execute`` hands its batch to the threads (a merged batch
cut into parts, ``split_requests``) and returns once another thread is free, so
Triton keeps the next requests in its queue (and merges them) while every thread is busy;
each answer goes back through its request's response sender.
A model without batching (``max_batch_size`` 0: a vision-language model's graphs, whose
batches the gateway makes) runs each request alone, its tensors as sent, empty ones too.
Where the config names a ``torch_file`` (GPU instances: ``converters/library/gpu.py``'s
TorchScript graph), it runs with PyTorch on the ``torch_device`` GPU instead of onnxruntime,
captured as CUDA graphs of the config's bucketed shapes when the model loads
(``torch_graphs.py``); the GPU memory it holds is a Triton metric
(``embedgate_gpu_memory_bytes``, per instance: weights and total).

Runs inside Triton's Python stub: numpy, onnxruntime, triton_python_backend_utils,
``batch_layout.py`` and ``torch_graphs.py`` (copied beside it), torch on GPU instances, only.
"""

import json
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

# Copied beside this file by the converter: where a batch is cut and packed.
from batch_layout import (
    PART_ROWS,
    PartThreads,
    batch_outputs,
    pack_rows,
    packed_feeds,
    per_token,
    plan_sub_batches,
    request_part,
)
from torch_graphs import (
    GRAPH_ROWS_PARAMETER,
    GRAPH_TOKENS_PARAMETER,
    GRAPH_WIDTHS_PARAMETER,
    Buckets,
    TorchScriptGraph,
    parse_sizes,
    report_memory,
)

# Names fixed by converters/triton_config.py (a test keeps them in step).
ONNX_FILE = "model.onnx"
PACKED_ONNX_FILE = "model.packed.onnx"
ONNX_FILE_PARAMETER = "onnx_file"
LENGTH_INPUT_PARAMETER = "length_input"
SUB_BATCH_PARAMETER = "sub_batch_size"
RUN_OVERHEAD_PARAMETER = "run_overhead_tokens"
PACK_WIDTH_PARAMETER = "pack_width"
# Token slots (rows times width) in one run of the packed graph. Larger runs were measured
# slower per text than sorted sub-batches of the plain graph (their activations outgrow
# the caches); with this cap packing is never slower, and much faster for small batches.
PACKED_RUN_TOKENS = 512
TORCH_FILE_PARAMETER = "torch_file"
TORCH_DEVICE_PARAMETER = "torch_device"
INTRA_OP_PARAMETER = "intra_op_thread_count"
INTER_OP_PARAMETER = "inter_op_thread_count"
# How many threads run batches side by side (PartThreads), by the name published configs carry.
BATCH_THREADS_PARAMETER = "batch_threads"
# Config data types of the tensors we publish.
DTYPES = {
    "TYPE_INT64": np.int64,
    "TYPE_INT32": np.int32,
    "TYPE_UINT8": np.uint8,
    "TYPE_FP32": np.float32,
}


def _parameter(config, key, default):
    value = config.get("parameters", {}).get(key, {}).get("string_value", "")
    return value if value != "" else default


class _Input:
    """One declared input: its name, numpy type, per-row dims (-1: any) and raggedness; of a
    model without batching (``max_batch_size`` 0), its whole shape."""

    def __init__(self, entry, batched):
        self.name = entry["name"]
        self.dtype = DTYPES[entry["data_type"]]
        # Triton's JSON gives dims as numbers; protobuf's JSON as strings.
        self.dims = [int(d) for d in entry.get("dims", [])]
        self.ragged = bool(entry.get("allow_ragged_batch", False))
        self.batched = batched

    def shape_text(self):
        if not self.batched:
            return "[" + ", ".join("any" if d == -1 else str(d) for d in self.dims) + "]"
        return "[batch, sequence]" if self.ragged else "[batch, " + ", ".join(map(str, self.dims)) + "]"

    def fits(self, shape):
        if not self.batched:
            return len(shape) == len(self.dims) and all(d in (-1, n) for d, n in zip(self.dims, shape))
        if self.ragged:
            return len(shape) == 2
        return len(shape) == 1 + len(self.dims) and all(d in (-1, n) for d, n in zip(self.dims, shape[1:]))


class TritonPythonModel:
    # The GPU graph (torch_graphs.TorchScriptGraph) where the config names one; onnxruntime otherwise.
    torch = None
    # Its memory gauges (kept alive while the model is loaded), where Triton has metrics.
    metrics = None
    # The threads that run batches side by side (batch_layout.PartThreads), in a decoupled model.
    part_threads = None

    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.part_threads = None
        # Without batching, each request runs alone with its tensors as sent (the gateway
        # batched them): a vision-language model's graphs.
        self.whole = int(config.get("max_batch_size", 0)) == 0
        self.inputs = [_Input(entry, not self.whole) for entry in config["input"]]
        if config.get("model_transaction_policy", {}).get("decoupled", False):
            count = max(1, int(_parameter(config, BATCH_THREADS_PARAMETER, "1")))
            part_rows = 0 if any(spec.ragged for spec in self.inputs) else PART_ROWS
            self.part_threads = PartThreads(
                count, self.answer, self._rows, part_rows, pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL, _error_response
            )
        self.outputs = [entry["name"] for entry in config["output"]]
        self.per_token = [per_token(entry) for entry in config["output"]]
        path = os.path.join(
            args["model_repository"],
            str(args["model_version"]),
            _parameter(config, ONNX_FILE_PARAMETER, ONNX_FILE),
        )
        self.length_input = _parameter(config, LENGTH_INPUT_PARAMETER, None)
        self.sub_batch_size = int(_parameter(config, SUB_BATCH_PARAMETER, "0"))
        self.run_overhead_tokens = float(_parameter(config, RUN_OVERHEAD_PARAMETER, "0"))
        self.pack_width = int(_parameter(config, PACK_WIDTH_PARAMETER, "0"))
        self.torch = None
        torch_file = _parameter(config, TORCH_FILE_PARAMETER, None)
        if torch_file is not None:
            buckets = Buckets(
                parse_sizes(_parameter(config, GRAPH_ROWS_PARAMETER, "")),
                parse_sizes(_parameter(config, GRAPH_WIDTHS_PARAMETER, "")),
                int(_parameter(config, GRAPH_TOKENS_PARAMETER, "0")),
            )
            self.torch = TorchScriptGraph(
                os.path.join(os.path.dirname(path), torch_file),
                _parameter(config, TORCH_DEVICE_PARAMETER, "cuda"),
                args.get("model_instance_name", ""),
                [(spec.name, spec.dtype, spec.dims, spec.ragged) for spec in self.inputs],
                int(_parameter(config, INTRA_OP_PARAMETER, "0")),
                buckets,
                _log,
            )
            instance = args.get("model_instance_name", "")
            self.metrics = report_memory(pb_utils, config.get("name", ""), instance, self.torch)
            self.packed = False
            return
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(_parameter(config, INTRA_OP_PARAMETER, "0"))
        options.inter_op_num_threads = int(_parameter(config, INTER_OP_PARAMETER, "0"))
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Spinning threads would take CPU from Triton, the other instances and the gateway.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # The packed graph computes what the plain one does (one text per row costs the
        # same), so where it exists it is the only one loaded: one copy of the weights.
        packed_path = os.path.join(os.path.dirname(path), PACKED_ONNX_FILE)
        self.packed = self.length_input is not None and self.pack_width > 0 and os.path.exists(packed_path)
        self.session = ort.InferenceSession(
            packed_path if self.packed else path, sess_options=options, providers=["CPUExecutionProvider"]
        )

    def execute(self, requests):
        if self.part_threads is None:
            return self.answer(requests)
        self.part_threads.submit(requests)
        return None

    def _rows(self, request):
        """A request's rows (1 without its first input: it is answered with its error)."""
        tensor = pb_utils.get_input_tensor_by_name(request, self.inputs[0].name)
        return (tensor.as_numpy().shape or (1,))[0] if tensor is not None else 1

    def answer(self, requests):
        """The response of each request of one batch, in order."""
        if self.whole:
            return [self._answer_alone(request) for request in requests]
        responses = [None] * len(requests)
        batch = []  # (request index, {input name: array})
        for index, request in enumerate(requests):
            try:
                arrays = self._read(request)
            except ValueError as error:
                responses[index] = _error_response(str(error))
                continue
            batch.append((index, arrays))

        if batch:
            try:
                results = self._run([arrays for _, arrays in batch])
            except Exception as error:  # noqa: BLE001 - reported to every request of this batch
                engine = "onnxruntime" if self.torch is None else "PyTorch"
                for index, _ in batch:
                    responses[index] = _error_response(f"{engine} failed: {error}")
            else:
                start = 0
                for index, arrays in batch:
                    rows, *width = next(iter(arrays.values())).shape
                    tensors = [
                        pb_utils.Tensor(name, request_part(values, start, rows, width, wide))
                        for name, values, wide in zip(self.outputs, results, self.per_token)
                    ]
                    start += rows
                    responses[index] = pb_utils.InferenceResponse(output_tensors=tensors)
        return responses

    def _answer_alone(self, request):
        """A request of a model without batching: its tensors through one run, as they are."""
        try:
            arrays = self._read(request)
        except ValueError as error:
            return _error_response(str(error))
        try:
            outputs = self.session.run(self.outputs, arrays)
        except Exception as error:  # noqa: BLE001 - reported to the request
            return _error_response(f"onnxruntime failed: {error}")
        return pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor(name, values) for name, values in zip(self.outputs, outputs)]
        )

    def _read(self, request):
        arrays = {}
        for spec in self.inputs:
            tensor = pb_utils.get_input_tensor_by_name(request, spec.name)
            if tensor is None:
                raise ValueError(f"input {spec.name} is required")
            array = tensor.as_numpy()
            if not spec.fits(array.shape):
                raise ValueError(f"{spec.name} must be {spec.shape_text()}, got shape {list(array.shape)}")
            if self.whole:  # an empty tensor may mean nothing to add (no image rows for texts)
                arrays[spec.name] = array.astype(spec.dtype, copy=False)
                continue
            if array.size == 0:
                raise ValueError(f"empty input: {spec.name} has shape {list(array.shape)}")
            arrays[spec.name] = array.astype(spec.dtype, copy=False)
        if self.whole:
            return arrays
        ragged = [(spec.name, arrays[spec.name].shape) for spec in self.inputs if spec.ragged]
        for name, shape in ragged[1:]:
            if shape != ragged[0][1]:
                raise ValueError(
                    f"{ragged[0][0]} shape {list(ragged[0][1])} does not match {name} shape {list(shape)}"
                )
        rows = {array.shape[0] for array in arrays.values()}
        if len(rows) > 1:
            raise ValueError(f"inputs have different batch sizes: {sorted(rows)}")
        return arrays

    def _run(self, batch):
        feeds = {}
        for spec in self.inputs:
            parts = [arrays[spec.name] for arrays in batch]
            if spec.ragged:
                merged = np.zeros((sum(p.shape[0] for p in parts), max(p.shape[1] for p in parts)), dtype=spec.dtype)
                start = 0
                for part in parts:
                    merged[start : start + part.shape[0], : part.shape[1]] = part
                    start += part.shape[0]
            else:
                merged = parts[0] if len(parts) == 1 else np.concatenate(parts)
            feeds[spec.name] = merged
        if self.length_input is None or self.sub_batch_size <= 0:
            return self._run_rows(feeds)
        lengths = np.count_nonzero(feeds[self.length_input], axis=1)
        if self.packed and int(lengths.max()) <= self.pack_width:
            return self._run_packed(feeds, lengths)
        return self._run_sorted(feeds, lengths)

    def _run_packed(self, feeds, lengths):
        """The batch's texts end to end in rows of at most ``pack_width`` tokens (see
        ``pack_rows``), run through the packed graph, which pools each text over its own
        tokens; at most ``PACKED_RUN_TOKENS`` token slots per run. Results in the batch's
        row order."""
        ids = feeds["input_ids"]
        rows = pack_rows(lengths, self.pack_width)
        sizes = lengths.tolist()
        row_tokens = [sum(sizes[text] for text in row) for row in rows]
        runs = -(-len(rows) // max(1, PACKED_RUN_TOKENS // max(1, max(row_tokens))))
        per_run = -(-len(rows) // runs)  # runs of about the same size
        results = None
        for first in range(0, len(rows), per_run):
            run_rows = rows[first : first + per_run]
            texts = np.array([text for row in run_rows for text in row], dtype=np.int64)
            width = max(row_tokens[first : first + per_run])
            input_ids, position_ids, segment_ids, token_index = packed_feeds(ids, lengths, run_rows, texts, width)
            outputs = self.session.run(
                self.outputs,
                {"input_ids": input_ids, "position_ids": position_ids, "segment_ids": segment_ids, "token_index": token_index},
            )
            if results is None:
                results = [np.empty((len(lengths),) + out.shape[1:], dtype=out.dtype) for out in outputs]
            for result, out in zip(results, outputs):
                result[texts] = out
        return results

    def _run_rows(self, feeds):
        """One run with one text per row, right-padded, as the plain graph takes them."""
        if self.torch is not None:
            return [self.torch.run(feeds)]
        if not self.packed:
            return self.session.run(self.outputs, feeds)
        tokens = feeds[self.length_input] > 0
        rows, width = tokens.shape
        cells = np.arange(rows * width, dtype=np.int64).reshape(rows, width)
        return self.session.run(
            self.outputs,
            {
                "input_ids": feeds["input_ids"],
                "position_ids": np.where(tokens, np.arange(width, dtype=np.int64), 0),
                "segment_ids": tokens.astype(np.int64),
                "token_index": np.where(tokens, cells, rows * width),
            },
        )

    def _run_sorted(self, feeds, lengths):
        """Length-sorted sub-batches (see ``plan_sub_batches``); results put back in row order."""
        order = np.argsort(lengths, kind="stable")
        sorted_lengths = np.maximum(lengths[order], 1)
        results = None
        for start, end in plan_sub_batches(sorted_lengths, self.sub_batch_size, self.run_overhead_tokens):
            rows = order[start:end]
            width = int(sorted_lengths[end - 1])
            part = {name: array[rows, :width] for name, array in feeds.items()}
            outputs = self._run_rows(part)
            if results is None:
                results = batch_outputs(outputs, len(order), next(iter(feeds.values())).shape[1], self.per_token)
            for result, out in zip(results, outputs):
                result[rows, : out.shape[1]] = out  # (a per-token output: this run's width)
        return results

    def finalize(self):
        if self.part_threads is not None:
            self.part_threads.stop()
        self.session = None
        self.torch = None
        if self.metrics is not None:
            self.metrics[1].clear()  # the gauges go before their family
            self.metrics = None


def _log(message, warning=False):
    """To Triton's log (a warning reaches the gateway's log at info level; info, at debug)."""
    logger = getattr(pb_utils, "Logger", None)
    if logger is not None:
        (logger.log_warn if warning else logger.log_info)(message)


def _error_response(message):
    return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message))
