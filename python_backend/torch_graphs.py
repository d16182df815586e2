"""Launch-free forwards: a GPU instance's TorchScript graph captured as CUDA graphs, one per
bucket of shapes, and replayed with each batch padded up to its bucket.

Eager PyTorch launches every kernel of every layer from the CPU, about 4.7 ms for a
MiniLM-shaped forward and 8.7 ms for a base one whatever the batch, so a stub spends its
time launching, not computing. A CUDA graph replays a whole captured forward with one
launch. A graph has fixed shapes, so the batches are padded: rows up to the next of
``rows`` (batch sizes) and, for ragged text inputs, the width up to the next of ``widths``
(sequence lengths). The extra columns have attention mask 0, as the padding a batch
already gets; the extra rows attend to one token only and are dropped from the answer.
A batch beyond every bucket is run in slices that fit one.

Every bucket is warmed up and captured when the model loads, largest first, into one
memory pool: the graphs of one instance never run at once (its batches run one after
another) and each answer is copied out before the next replay, so they share activations.
Where the device is not CUDA (the unit tests' ``torch_device cpu``) the same padding runs
eagerly, so what padding does to an answer is tested without a GPU.

Copied beside ``model.py`` by the converter; imports numpy and torch only.
"""

import time

import numpy as np

# Config parameters (converters/triton_config.py writes them; a test keeps them in step).
GRAPH_ROWS_PARAMETER = "graph_rows"
GRAPH_WIDTHS_PARAMETER = "graph_widths"
GRAPH_TOKENS_PARAMETER = "graph_max_tokens"
# Warm-up runs of a bucket before its capture (cuBLAS picks its kernels on the first).
# The Triton metric (a gauge per instance and part) of a GPU instance's memory.
GPU_MEMORY_METRIC = "embedgate_gpu_memory_bytes"
WARMUP_RUNS = 2
# The input whose 1s mark attended tokens (padding rows get one).
MASK_INPUT = "attention_mask"


def parse_sizes(text):
    """``"1,2,4"`` -> ``[1, 2, 4]``, sorted, without repeats; ``""`` -> ``[]``."""
    return sorted({int(part) for part in text.split(",") if part.strip()})


def load_module(torch, path, device):
    """A TorchScript file for ``device``, its tensors where they were saved: a traced model's
    shape arithmetic keeps small tensors on the CPU (``seq_length + 0`` for BERT's position
    ids, read back with ``int``), and moved to the GPU each read would wait for the GPU,
    which a CUDA graph capture forbids. The converter traces on ``cuda:0``; an instance on
    another GPU gets everything moved there (its captures may then fail: it runs eagerly)."""
    target = torch.device(device)
    if target.type == "cuda" and (target.index or 0) != 0:
        return torch.jit.load(path, map_location=target).eval()
    return torch.jit.load(path).eval()


class Buckets:
    """The shapes captured: ``rows`` x ``widths`` (``widths`` empty: inputs of fixed shape,
    rows only), each of at most ``max_tokens`` rows times width."""

    def __init__(self, rows, widths, max_tokens=0):
        self.rows = sorted(set(rows))
        self.widths = sorted(set(widths))
        self.max_tokens = max_tokens

    def fits(self, rows, width):
        return not self.max_tokens or not width or rows * width <= self.max_tokens

    def shapes(self):
        """Every (rows, width) captured (width None: fixed shapes), largest first."""
        widths = self.widths or [None]
        shapes = [(r, w) for w in widths for r in self.rows if self.fits(r, w or 0)]
        return sorted(shapes, key=lambda shape: (shape[0] * (shape[1] or 1), shape), reverse=True)

    def width_for(self, width):
        """The bucket width of a batch ``width`` wide (None: wider than every bucket)."""
        if not self.widths:
            return None
        return next((w for w in self.widths if w >= width), None)

    def most_rows(self, width):
        """The most rows of one bucket ``width`` wide (0: none)."""
        return max((r for r in self.rows if self.fits(r, width or 0)), default=0)

    def pick(self, rows, width):
        """The bucket a batch of ``rows`` x ``width`` runs in, or None where none holds it."""
        bucket_width = self.width_for(width) if self.widths else None
        if self.widths and bucket_width is None:
            return None
        bucket_rows = next((r for r in self.rows if r >= rows and self.fits(r, bucket_width or 0)), None)
        return None if bucket_rows is None else (bucket_rows, bucket_width)

    def slices(self, rows, width):
        """(start, end) row ranges of a batch, each fitting a bucket (one range where the
        batch does); empty where its width fits none."""
        if self.widths and self.width_for(width) is None:
            return []
        most = self.most_rows(self.width_for(width))
        if most == 0:
            return []
        count = -(-rows // most)
        size = -(-rows // count)  # slices of about equal rows
        return [(start, min(rows, start + size)) for start in range(0, rows, size)]


class _Bucket:
    """One captured shape: its static inputs, its graph (None: run eagerly) and output."""

    def __init__(self, inputs, graph, output):
        self.inputs, self.graph, self.output = inputs, graph, output


class GraphRunner:
    """``module`` (a TorchScript graph of ``input_names``) run through captured buckets.

    ``ragged``: the inputs are token ids of any width (the second axis is bucketed), else
    fixed shapes. ``mask_input``: the input whose 1s mark attended tokens (padding rows get
    one), or None. ``run(feeds)`` answers numpy float32, one row per input row (a per-token
    output cut to the batch's width)."""

    def __init__(self, torch, module, device, input_names, input_dtypes, fixed_dims, buckets, ragged, mask_input):
        self.torch = torch
        self.module = module
        self.device = device
        self.input_names = list(input_names)
        self.input_dtypes = input_dtypes
        self.fixed_dims = fixed_dims  # per input: the dims after the batch axis (ragged: [])
        self.buckets = buckets
        self.ragged = ragged
        self.mask_input = mask_input
        self.captured = {}
        self.capture_seconds = 0.0
        self.graphs = device.startswith("cuda") and torch.cuda.is_available()
        self.pool = torch.cuda.graph_pool_handle() if self.graphs else None
        self.stream = torch.cuda.Stream(device=device) if self.graphs else None

    def capture(self):
        """Warm up and capture every bucket (largest first, one memory pool)."""
        started = time.monotonic()
        for rows, width in self.buckets.shapes():
            self.captured[(rows, width)] = self._capture_one(rows, width)
        if self.graphs:
            self.torch.cuda.synchronize(self.device)
        self.capture_seconds = time.monotonic() - started

    def _static_inputs(self, rows, width):
        torch = self.torch
        tensors = []
        for name, dtype, dims in zip(self.input_names, self.input_dtypes, self.fixed_dims):
            shape = (rows, width) if self.ragged else (rows, *dims)
            tensor = torch.zeros(shape, dtype=getattr(torch, np.dtype(dtype).name), device=self.device)
            if name == self.mask_input:
                tensor[:, 0] = 1
            tensors.append(tensor)
        return tensors

    def _capture_one(self, rows, width):
        torch = self.torch
        inputs = self._static_inputs(rows, width)
        if not self.graphs:
            return _Bucket(inputs, None, None)
        with torch.inference_mode():
            self.stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(self.stream):
                for _ in range(WARMUP_RUNS):
                    self.module(*inputs)
            torch.cuda.current_stream(self.device).wait_stream(self.stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
                output = self.module(*inputs).float()
        return _Bucket(inputs, graph, output)

    def drop_graphs(self):
        """Forget every capture (after a failed one): batches run eagerly."""
        self.captured = {}
        self.graphs = False
        if self.device.startswith("cuda"):
            self.torch.cuda.synchronize(self.device)
            self.torch.cuda.empty_cache()

    def describe(self):
        memory = self.memory()
        return (
            f"{len(self.captured)} CUDA graphs captured in {self.capture_seconds:.1f} s; "
            f"GPU memory {memory['total'] / 2**20:.0f} MiB ({memory['weights'] / 2**20:.0f} MiB weights)"
            if self.graphs
            else "no CUDA graphs (not a CUDA device, or no buckets)"
        )

    def run(self, feeds):
        first = feeds[self.input_names[0]]
        rows = first.shape[0]
        width = first.shape[1] if self.ragged else 0
        slices = self.buckets.slices(rows, width)
        if not slices:
            return self._eager(feeds)
        parts = [self._run_bucket({n: feeds[n][start:end] for n in self.input_names}) for start, end in slices]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _run_bucket(self, feeds):
        torch = self.torch
        first = feeds[self.input_names[0]]
        rows = first.shape[0]
        width = first.shape[1] if self.ragged else 0
        shape = self.buckets.pick(rows, width)
        bucket = self.captured.get(shape)
        if bucket is None:
            return self._eager(feeds)
        bucket_rows = shape[0]
        with torch.inference_mode():
            for name, static in zip(self.input_names, bucket.inputs):
                padded = np.zeros(tuple(static.shape), dtype=feeds[name].dtype)
                if self.ragged:
                    padded[:rows, :width] = feeds[name]
                else:
                    padded[:rows] = feeds[name]
                if name == self.mask_input and bucket_rows > rows:
                    padded[rows:, 0] = 1
                static.copy_(torch.from_numpy(padded))
            if bucket.graph is not None:
                bucket.graph.replay()
                output = bucket.output
            else:
                output = self.module(*bucket.inputs).float()
            output = output[:rows]
            if self.ragged and output.dim() == 3:
                output = output[:, :width]  # a per-token output: this batch's width
            return output.cpu().numpy()

    def _eager(self, feeds):
        torch = self.torch
        with torch.inference_mode():
            inputs = [torch.from_numpy(feeds[name]).to(self.device) for name in self.input_names]
            return self.module(*inputs).float().cpu().numpy()

    def memory(self):
        """Bytes on the device: ``weights`` (parameters and buffers), ``total`` (what the
        caching allocator holds: weights, graphs' pool, static inputs)."""
        torch = self.torch
        weights = sum(t.numel() * t.element_size() for t in list(self.module.parameters()) + list(self.module.buffers()))
        total = torch.cuda.memory_reserved(self.device) if self.graphs else 0
        return {"weights": int(weights), "total": int(total)}


class TorchScriptGraph:
    """A GPU instance's model: the TorchScript graph on one GPU, inputs in, its one output
    back as float32 numpy, through CUDA graphs of the ``buckets`` captured here, at load
    time (eagerly where a capture fails, which ``log`` warns of). ``inputs``: (name, numpy
    dtype, dims, ragged) of each input. Triton sees a CPU instance; with several GPUs,
    instance ``<model>_<n>`` takes GPU ``n`` modulo their count. TorchScript's profiling
    optimizations are off: shapes differ from batch to batch, and nothing may compile
    during a capture."""

    def __init__(self, path, device, instance_name, inputs, threads, buckets, log):
        import torch

        if threads > 0:
            torch.set_num_threads(threads)
        if device == "cuda" and torch.cuda.device_count() > 1:
            number = instance_name.rsplit("_", 1)[-1]
            device = f"cuda:{int(number) % torch.cuda.device_count() if number.isdigit() else 0}"
        if device.startswith("cuda") and torch.device(device).index is not None:
            torch.cuda.set_device(torch.device(device))  # captures and their pool on this GPU
        self.torch = torch
        self.device = device
        names = [name for name, *_ in inputs]
        self.runner = GraphRunner(
            torch,
            load_module(torch, path, device),
            device,
            names,
            [dtype for _, dtype, _, _ in inputs],
            [dims for _, _, dims, _ in inputs],
            buckets,
            any(ragged for *_, ragged in inputs),
            MASK_INPUT if MASK_INPUT in names else None,
        )
        with torch.jit.optimized_execution(False):
            try:
                self.runner.capture()
            except Exception as error:  # noqa: BLE001 - served eagerly, and said so
                self.runner.drop_graphs()
                log(f"{instance_name}: CUDA graphs not captured ({type(error).__name__}: {error}); running eagerly",
                    warning=True)
            else:
                log(f"{instance_name}: {self.runner.describe()}")

    def run(self, feeds):
        with self.torch.jit.optimized_execution(False):
            return self.runner.run(feeds)


def report_memory(pb_utils, model, instance, graph):
    """The instance's GPU memory as Triton gauges (``GPU_MEMORY_METRIC``, labelled by
    model, instance and part); None where this Triton has no custom metrics."""
    family_type = getattr(pb_utils, "MetricFamily", None)
    if family_type is None or not graph.runner.graphs:
        return None
    family = family_type(
        name=GPU_MEMORY_METRIC,
        description="GPU memory of a model instance: its weights, and all it holds (weights, CUDA graphs, buffers)",
        kind=family_type.GAUGE,
    )
    gauges = []
    for part, value in graph.runner.memory().items():
        gauge = family.Metric(labels={"model": model, "instance": instance, "part": part})
        gauge.set(value)
        gauges.append(gauge)
    return family, gauges
