"""The model as Triton's Python stub runs it, in this process.

The repository's own ``model.py`` (with ``batch_layout.py`` and ``torch_graphs.py`` copied beside it) is
imported with a stand-in for ``triton_python_backend_utils`` and handed batches of
tokenized sentences as Triton hands them: each a request of ``rows`` texts, from as many
threads as the stub runs side by side (``batch_threads`` in the model's config), as its
threads run them. The process's CPU time per text is then the model's own share of what the server
spends per text (its graph, its packing and sub-batching), measured apart from Triton,
the stub's transport and the gateway.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
import time
import types
from pathlib import Path

import numpy as np

from embedgate.bench.inprocess import CONFIG_FILE, LocalModel

STUB_FILE = "model.py"
PB_UTILS = "triton_python_backend_utils"
FINAL_FLAG = 1  # TRITONSERVER_RESPONSE_COMPLETE_FINAL


class Tensor:
    def __init__(self, name: str, array: np.ndarray):
        self._name, self._array = name, np.asarray(array)

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array


class TritonError:
    def __init__(self, message: str):
        self._message = message

    def message(self) -> str:
        return self._message


class InferenceResponse:
    def __init__(self, output_tensors, error=None):
        self.output_tensors, self.error = list(output_tensors), error

    def has_error(self) -> bool:
        return self.error is not None

    def output(self, name: str) -> np.ndarray:
        return next(t.as_numpy() for t in self.output_tensors if t.name() == name)


class _Request:
    def __init__(self, **inputs: np.ndarray):
        self.inputs = [Tensor(name, array) for name, array in inputs.items()]


def stand_in() -> types.ModuleType:
    """What model.py uses of ``triton_python_backend_utils`` (requests: objects with an
    ``inputs`` list of tensors; a decoupled model's also ``get_response_sender()``)."""
    module = types.ModuleType(PB_UTILS)
    module.Tensor = Tensor
    module.TritonError = TritonError
    module.InferenceResponse = InferenceResponse
    module.get_input_tensor_by_name = lambda request, name: next(
        (tensor for tensor in request.inputs if tensor.name() == name), None
    )
    module.TRITONSERVER_RESPONSE_COMPLETE_FINAL = FINAL_FLAG
    return module


def _config_json(model_dir: Path) -> dict:
    from google.protobuf import json_format

    from embedgate.converters.triton_config import parse

    config = parse((model_dir / CONFIG_FILE).read_text())
    # Triton hands model.py its config as JSON with the proto's field names.
    return json.loads(json_format.MessageToJson(config, preserving_proto_field_name=True))


def open_stub(model_dir: Path):
    """The stub's model, initialized from the repository as Triton initializes it, and how
    many threads it runs batches on; None where the model is not a CPU model of the Python backend."""
    stub = model_dir / "1" / STUB_FILE
    if not stub.is_file() or not (model_dir / CONFIG_FILE).is_file():
        return None
    config = _config_json(model_dir)
    parameters = {key: value.get("string_value", "") for key, value in config.get("parameters", {}).items()}
    if parameters.get("torch_file"):
        return None  # a GPU graph: its cost is not a core's
    saved = sys.modules.get(PB_UTILS)
    sys.modules[PB_UTILS] = stand_in()
    sys.path.insert(0, str(stub.parent))
    try:
        spec = importlib.util.spec_from_file_location("embedgate_served_model", stub)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(stub.parent))
        if saved is None:
            sys.modules.pop(PB_UTILS, None)
        else:
            sys.modules[PB_UTILS] = saved
    instance = module.TritonPythonModel()
    instance.initialize({"model_config": json.dumps(config), "model_repository": str(model_dir), "model_version": "1"})
    # (``worker_count`` in the configs of models converted before it was named so)
    return instance, max(1, int(parameters.get("batch_threads") or parameters.get("worker_count") or 1))


def core_ms_per_text(model: LocalModel, texts: list[str], rows: int) -> dict | None:
    """CPU ms per text (and texts/s) of the served model answering ``texts`` in requests of
    ``rows`` texts, on as many threads as the stub runs, tokenized beforehand as the gateway sends them;
    None where the model has no CPU stub in the repository."""
    opened = open_stub(model.onnx_path.parent.parent)
    if opened is None:
        return None
    stub, thread_count = opened
    rows = max(1, rows)
    batches = []
    for start in range(0, len(texts), rows):
        tokens = model.tokenizer.encode(texts[start : start + rows])
        longest = int(max(tokens.token_counts))
        batches.append([_Request(input_ids=tokens.input_ids[:, :longest], attention_mask=tokens.attention_mask[:, :longest])])
    try:
        stub.answer(batches[0])  # onnxruntime plans on its first runs
        pending = iter(batches)
        lock = threading.Lock()
        failed: list[str] = []

        def work() -> None:
            while True:
                with lock:
                    batch = next(pending, None)
                if batch is None:
                    return
                failed.extend(r.error.message() for r in stub.answer(batch) if r.has_error())

        threads = [threading.Thread(target=work) for _ in range(thread_count)]
        cpu, wall = time.process_time(), time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        stub.finalize()
    if failed:
        raise RuntimeError(f"the served model failed: {failed[0]}")
    return {
        "rows_per_request": rows,
        "texts": len(texts),
        "threads": thread_count,
        "core_ms_per_text": round(cpu * 1000 / len(texts), 4),
        "texts_per_s": round(len(texts) / wall, 2),
    }
