"""Triton Python-backend model: runs a published text-embedding ONNX file with onnxruntime.

Copied as ``<model>/1/model.py``. Inputs are ragged (``allow_ragged_batch``), so each
request of a dynamic batch arrives with its own ``[n_i, len_i]`` shape. All well-formed
requests are right-padded to the longest length (id 0, mask 0: the graph pools under the
mask, so padding does not change an embedding), concatenated, and run as ONE onnxruntime
call; the output is split back by ``n_i``. A malformed request gets its own error response
and does not fail the others.

Runs inside Triton's Python stub: numpy, onnxruntime and triton_python_backend_utils only.
"""

import json
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

# Names fixed by converters/spec.py and converters/triton_config.py (a test keeps them in step).
INPUT_IDS = "input_ids"
ATTENTION_MASK = "attention_mask"
EMBEDDING = "embedding"
ONNX_FILE = "model.onnx"
ONNX_FILE_PARAMETER = "onnx_file"
INTRA_OP_PARAMETER = "intra_op_thread_count"
INTER_OP_PARAMETER = "inter_op_thread_count"


def _parameter(config, key, default):
    value = config.get("parameters", {}).get(key, {}).get("string_value", "")
    return value if value != "" else default


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        path = os.path.join(
            args["model_repository"],
            str(args["model_version"]),
            _parameter(config, ONNX_FILE_PARAMETER, ONNX_FILE),
        )
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(_parameter(config, INTRA_OP_PARAMETER, "0"))
        options.inter_op_num_threads = int(_parameter(config, INTER_OP_PARAMETER, "0"))
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])

    def execute(self, requests):
        responses = [None] * len(requests)
        batch = []  # (request index, input_ids, attention_mask)
        for index, request in enumerate(requests):
            try:
                ids, mask = self._read(request)
            except ValueError as error:
                responses[index] = _error_response(str(error))
                continue
            batch.append((index, ids, mask))

        if batch:
            try:
                embeddings = self._run(batch)
            except Exception as error:  # noqa: BLE001 - reported to every request of this batch
                for index, _, _ in batch:
                    responses[index] = _error_response(f"onnxruntime failed: {error}")
            else:
                start = 0
                for index, ids, _ in batch:
                    rows = embeddings[start : start + ids.shape[0]]
                    start += ids.shape[0]
                    tensor = pb_utils.Tensor(EMBEDDING, np.ascontiguousarray(rows, dtype=np.float32))
                    responses[index] = pb_utils.InferenceResponse(output_tensors=[tensor])
        return responses

    def _read(self, request):
        ids_tensor = pb_utils.get_input_tensor_by_name(request, INPUT_IDS)
        mask_tensor = pb_utils.get_input_tensor_by_name(request, ATTENTION_MASK)
        if ids_tensor is None or mask_tensor is None:
            raise ValueError(f"both {INPUT_IDS} and {ATTENTION_MASK} are required")
        ids = ids_tensor.as_numpy()
        mask = mask_tensor.as_numpy()
        if ids.ndim != 2 or mask.ndim != 2:
            raise ValueError(
                f"{INPUT_IDS} and {ATTENTION_MASK} must be [batch, sequence], "
                f"got shapes {list(ids.shape)} and {list(mask.shape)}"
            )
        if ids.shape != mask.shape:
            raise ValueError(
                f"{INPUT_IDS} shape {list(ids.shape)} does not match {ATTENTION_MASK} shape {list(mask.shape)}"
            )
        if ids.shape[0] == 0 or ids.shape[1] == 0:
            raise ValueError(f"empty input: shape {list(ids.shape)}")
        return ids.astype(np.int64, copy=False), mask.astype(np.int64, copy=False)

    def _run(self, batch):
        rows = sum(ids.shape[0] for _, ids, _ in batch)
        length = max(ids.shape[1] for _, ids, _ in batch)
        all_ids = np.zeros((rows, length), dtype=np.int64)
        all_mask = np.zeros((rows, length), dtype=np.int64)
        start = 0
        for _, ids, mask in batch:
            n, width = ids.shape
            all_ids[start : start + n, :width] = ids
            all_mask[start : start + n, :width] = mask
            start += n
        (embeddings,) = self.session.run([EMBEDDING], {INPUT_IDS: all_ids, ATTENTION_MASK: all_mask})
        return embeddings

    def finalize(self):
        self.session = None


def _error_response(message):
    return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message))
