"""The graph GPU instances run: a sentence-transformers model's module stack (or an
OpenCLIP tower: ``build_module``) traced with TorchScript on CUDA.

The Python-backend model on a GPU instance runs this file with PyTorch (the GPU runtime
a pip install has: onnxruntime's CUDA provider comes only with ``onnxruntime-gpu`` and
CUDA libraries of its own). The trace is the very module stack the ONNX export traces
(``module_stack.stack_graph``), with the same inputs and output, so one config.pbtxt
and one gateway serve both. It is traced on the GPU, in float16 where that keeps
``half_parity_threshold`` against the float32 PyTorch model (what the kind's own check
measures, on the saved file, each input in one padded batch and alone), else in float32
at the model's own threshold. GPU instances replay it as CUDA graphs
(``python_backend/torch_graphs.py``, which also loads it here, for the parity check, as the
instances load it). Runs in the conversion subprocess.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from embedgate.contract.errors import ConversionError, ParityError, UnsupportedModelError
from embedgate.contract.spec import ATTENTION_MASK, INPUT_IDS, TORCH_FILE, GpuInfo, ImageParityResult, ParityResult
from embedgate.converters.library import module_stack
from embedgate.converters.library.parity import Run
from embedgate.python_backend.torch_graphs import load_module

Step = Callable[[str], None]
# A kind's parity check of a runner; ``half``: the float16 graph, judged at the half threshold.
Check = Callable[[Run, bool], ParityResult | ImageParityResult]
DEVICE = "cuda:0"
# The attention implementation a graph whose other one loses parity is traced with again.
EAGER = "eager"


def runner(torch_file: Path, input_names: Sequence[str], device: str = DEVICE) -> Run:
    """``torch_file`` as model.py runs it: inputs moved to ``device``, the output back as
    float32 numpy; TorchScript's profiling optimizations off (shapes change every batch)."""
    import torch

    module = load_module(torch, str(torch_file), device)

    def run(feeds: dict[str, np.ndarray]) -> np.ndarray:
        with torch.inference_mode(), torch.jit.optimized_execution(False):
            output = module(*[torch.from_numpy(feeds[name]).to(device) for name in input_names])
        return output.float().cpu().numpy()

    return run


def trace(
    model,
    example: dict,
    torch_file: Path,
    dtype,
    *,
    input_names: Sequence[str] = (INPUT_IDS, ATTENTION_MASK),
    zero_token_types: bool = False,
    output_key: str = "sentence_embedding",
    after: Callable | None = None,
    pad_token_id: int | None = None,
    device: str = DEVICE,
    attention: str | None = None,
) -> bool:
    """Trace a module stack (``model``: a model, or one route's modules) on ``device`` in
    ``dtype`` and save it to ``torch_file`` (the modules themselves are left as they were);
    ``attention``: as ``trace_module``."""
    import torch

    moved = copy.deepcopy(torch.nn.ModuleList(list(model))).to(device=device, dtype=dtype)
    graph = module_stack.stack_graph(moved, input_names, zero_token_types, output_key, after, pad_token_id)
    with module_stack.index_based_masks():
        return trace_module(graph, [example[name] for name in input_names], torch_file, device, attention)


def trace_module(graph, inputs: Sequence, torch_file: Path, device: str = DEVICE, attention: str | None = None) -> bool:
    """Trace ``graph`` (already on ``device``, in its dtype) on ``inputs`` and save it to
    ``torch_file``. nn.MultiheadAttention's fused inference path is off while it traces:
    the plain path is what the model computes in float32, and it has fixed shapes.
    ``attention`` (``"eager"``): the transformers models in ``graph`` that attend through
    another implementation are switched to it first; returns whether any was."""
    import torch

    switched = switch_attention(graph, attention) if attention else False
    moved = tuple(value.to(device) for value in inputs)
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's shape-dependent branches; parity decides
            traced = torch.jit.trace(graph, moved, check_trace=False)
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
    torch_file.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.save(traced, str(torch_file))
    del traced, graph
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return switched


def switch_attention(graph, attention: str) -> bool:
    """Switch every transformers model in ``graph`` that attends otherwise to ``attention``
    (its mask builder follows it); whether any was."""
    switched = False
    for module in graph.modules():
        config = getattr(module, "config", None)
        current = getattr(config, "_attn_implementation", None)
        if current is None or current == attention or not hasattr(module, "set_attn_implementation"):
            continue
        try:
            module.set_attn_implementation(attention)
        except (ValueError, ImportError):  # a model that cannot: it keeps its own
            continue
        switched = True
    return switched


def build(
    model,
    example: dict,
    version_dir: Path,
    check: Check,
    step: Step,
    *,
    half: bool = True,
    input_names: Sequence[str] = (INPUT_IDS, ATTENTION_MASK),
    device: str = DEVICE,
    **trace_options,
) -> GpuInfo:
    """Publish ``version_dir/model.pt`` for GPU instances: a module stack, float16 if ``half``
    and it passes ``check``, else float32 (which must pass it). Raises ConversionError
    without a GPU, and UnsupportedModelError for a module stack whose trace does not run
    on other inputs."""

    def traced(dtype, torch_file: Path, attention: str | None) -> bool:
        return trace(
            model, example, torch_file, dtype, input_names=input_names, device=device, attention=attention, **trace_options
        )

    return build_graph(traced, version_dir, check, step, half=half, input_names=input_names, device=device)


def build_module(
    make: Callable,
    inputs: Sequence,
    version_dir: Path,
    check: Check,
    step: Step,
    *,
    input_names: Sequence[str],
    half: bool = True,
    device: str = DEVICE,
) -> GpuInfo:
    """``build`` for any module: ``make(dtype, device)`` gives it (a copy: the caller's
    model stays as it is), traced on ``inputs``."""

    def traced(dtype, torch_file: Path, attention: str | None) -> bool:
        return trace_module(make(dtype, device), inputs, torch_file, device, attention)

    return build_graph(traced, version_dir, check, step, half=half, input_names=input_names, device=device)


def build_graph(
    traced: Callable, version_dir: Path, check: Check, step: Step, *, half: bool, input_names: Sequence[str], device: str
) -> GpuInfo:
    """``traced(dtype, torch_file, attention)`` saves the graph in ``dtype`` (and returns
    whether ``attention`` switched any model's); the first that passes ``check`` of float16
    (if ``half``), float32, and float32 with eager attention (where the model attends
    otherwise) is published."""
    import torch

    on_gpu = device.startswith("cuda")
    if on_gpu and not torch.cuda.is_available():
        raise ConversionError(
            "GPU instances need PyTorch with CUDA in the converter's environment: torch.cuda.is_available() is False"
        )
    torch_file = version_dir / TORCH_FILE
    device_name = torch.cuda.get_device_name(torch.device(device)) if on_gpu else device
    attempts = [(torch.float16, None)] if half else []
    # SDPA traced on CUDA answered one input of fourteen wrong, by 8.7 on a score, where the
    # same trace with eager attention kept every score (a tiny Qwen3 reranker on an H100).
    attempts += [(torch.float32, None), (torch.float32, EAGER)]
    failure: Exception | None = None
    for dtype, attention in attempts:
        name = "float16" if dtype == torch.float16 else "float32"
        step(f"tracing the module stack on {device_name} in {name}{' with eager attention' if attention else ''} (TorchScript)")
        try:
            if not traced(dtype, torch_file, attention) and attention is not None:
                step("no model in it attends otherwise: the float32 graph's failure stands")
                break
            result = check(runner(torch_file, input_names, device), dtype == torch.float16)
        except RuntimeError as error:
            # A trace keeps one path through the model's Python; some stacks take another
            # for other shapes (seen: a tiny MPNet on an H200). Refused, never served wrong.
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            failure = UnsupportedModelError(
                f"unsupported on GPU instances: the model's TorchScript trace does not run on other inputs "
                f"({first_line[:300]}); serve it on CPU instances (EMBEDGATE_INSTANCE_KIND=cpu)"
            )
            step(f"the {name} graph does not run on other inputs ({first_line[:300]})")
            if dtype == torch.float16:
                break  # float16 is only ever a lighter copy: a graph that does not run is refused
            continue
        except ParityError as error:
            failure = error
            step(f"the {name} graph refused ({error})")
            continue
        step(f"GPU graph parity passed ({name}{', eager attention' if attention else ''}): min cosine {result.min_cosine:.6f}")
        return GpuInfo(
            dtype=name,
            device=device_name,
            torch_version=torch.__version__,
            torch_bytes=torch_file.stat().st_size,
            parity=result,
        )
    assert failure is not None
    raise failure
