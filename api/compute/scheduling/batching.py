"""Batching policy, in one place: who batches a model's requests, and how.

Two batchers can merge requests into one model run:
- Triton's dynamic batcher (``dynamic_batching`` in the model's config), which collects
  the calls queued for a model and hands them to a free instance;
- the gateway's coalescer (``coalescing.py``), which merges small requests into shared
  tokenizer and Triton calls before they leave the gateway.

Measured on CPU, Triton's batcher hands one freed instance every queued call and leaves
the others waiting, so python-form sentence-transformers are published without it and the
coalescer is their only batcher: every request that fits one Triton call is merged, with
one call running per instance and one waiting. On a GPU too (an H200, 8 gateway workers,
MiniLM-shaped, docs/gpu.md): Triton's batcher merging the workers' calls made single
sentences at 256 clients 32% slower (the stub answers each request of a batch on its own),
32-sentence requests 13% faster. CLIP models keep Triton's batcher (their
image requests are not merged in the gateway), and so do the native form and any model
published with ``gateway_batching`` off; for them the coalescer merges only small requests.

Inside a Triton call the Python-backend model (``python_backend/model.py``) sorts
texts by length and cuts sub-batches, or packs short texts into shared rows; the
parameters it uses (``sub_batch_size``, ``run_overhead_tokens``, ``pack_width``) are set
here, in the model's config, when it is converted.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from embedgate.contract.spec import ModelLibrary, ModelMetadata, TritonConfigOptions, Variant

from ...settings import Settings

# GPU instances of the python form (PyTorch on the GPU): two per model, so one instance
# copies inputs and pads while the other computes; four, each a process with its own CUDA
# context time-sliced on the GPU, were 41% slower at 256 clients (H200). A run's fixed
# cost is one CUDA graph replay (about 0.3 ms, measured on an H100), the time a
# MiniLM-shaped forward takes for some 2,000 tokens (512 rows of 24 tokens in 1.79 ms);
# eager PyTorch's was 4.7 ms.
GPU_INSTANCES = 2
GPU_RUN_OVERHEAD_TOKENS = 2048.0
EAGER_GPU_RUN_OVERHEAD_TOKENS = 4096.0


class BatchingPolicy:
    """``gpu``: whether what runs the models serves on a GPU here (the backend's answer,
    ``api/compute/backend/``; it may block the first time); none: it does not."""

    def __init__(self, settings: Settings, gpu: Callable[[], bool] | None = None):
        self.settings = settings
        self._gpu = gpu or (lambda: False)

    def instance_kind(self, library: ModelLibrary, variant: Variant | None = None) -> str:
        """``gpu`` or ``cpu`` for a new model. auto: the native form's are GPU instances; the
        python form's are where the backend serves on a GPU (Triton's: one PyTorch can use),
        for the models it traces for the GPU (sentence-transformers and both OpenCLIP
        towers; not variants, which stay ONNX graphs on CPU instances)."""
        s = self.settings
        if s.triton_form == "onnxruntime":
            return "cpu" if s.instance_kind == "cpu" else "gpu"
        if variant is not None:
            return "cpu"
        if s.instance_kind == "auto":
            return "gpu" if self._gpu() else "cpu"
        return s.instance_kind

    def triton_options(self, library: ModelLibrary, variant: Variant | None = None) -> TritonConfigOptions:
        """The Triton config of a new model of ``library`` (``sentence_transformers``, ``open_clip``)."""
        s = self.settings
        instances, threads = s.instance_count, s.ort_intra_op_threads
        kind = self.instance_kind(library, variant)
        run_overhead_tokens, sub_batch_size = s.run_overhead_tokens, s.sub_batch_size
        graphs: dict[str, list[int]] = {}
        if s.triton_form == "python" and kind == "gpu":
            instances = instances or GPU_INSTANCES
            threads = threads or 1
            # Unless set: a whole call in one GPU run where padding costs less than a launch.
            if "run_overhead_tokens" not in s.model_fields_set:
                run_overhead_tokens = GPU_RUN_OVERHEAD_TOKENS if s.gpu_cuda_graphs else EAGER_GPU_RUN_OVERHEAD_TOKENS
            if "sub_batch_size" not in s.model_fields_set:
                sub_batch_size = s.max_batch_size
            if not s.gpu_cuda_graphs:
                graphs = {"graph_rows": [], "graph_widths": []}
        elif s.triton_form == "python":
            # Measured on CPU: one single-threaded onnxruntime per core keeps every core
            # busy, where one instance with a thread per core leaves them idle between ops.
            cores = os.cpu_count() or 1
            instances = instances or cores
            threads = threads or max(1, cores // instances)
        return TritonConfigOptions(
            form=s.triton_form,
            max_batch_size=s.max_batch_size,
            dynamic_batching=not self.gateway_batches(library),
            sub_batch_size=sub_batch_size,
            run_overhead_tokens=run_overhead_tokens,
            pack_width=s.pack_width,
            max_queue_delay_microseconds=s.max_queue_delay_us,
            max_queue_size=s.triton_max_queue_size,
            instance_count=instances or 1,
            instance_kind=kind,
            intra_op_threads=threads,
            **graphs,
        )

    def gateway_batches(self, library: ModelLibrary) -> bool:
        """Whether a new model of ``library`` is published without Triton's dynamic batcher:
        sentence-transformers' models (dense, sparse, cross-encoders), whose requests are
        all texts the coalescer merges."""
        s = self.settings
        return s.gateway_batching and s.triton_form == "python" and library == "sentence_transformers"

    def coalesced_texts(self, metadata: ModelMetadata) -> int:
        """Requests of at most this many texts go through the model's coalescer: all that
        fit in one Triton call where Triton does not batch (the coalescer is the only
        batcher), else the small ones (Triton merges the rest)."""
        if metadata.dynamic_batching:
            return self.settings.coalesce_max_texts
        return metadata.max_batch_size

    def spread(self, metadata: ModelMetadata, texts: int, calls_in_flight: int) -> int:
        """Calls to cut one request of ``texts`` into (``spreading.py``): one per idle
        instance, each of at least ``spread_min_texts``, where the coalescer is the model's
        only batcher and its instances are CPU cores; else one. An instance is idle when
        fewer calls are in flight than there are instances (the coalescer keeps one more
        waiting when all are busy, so nothing is waiting then)."""
        minimum = self.settings.spread_min_texts
        if not minimum or metadata.dynamic_batching or metadata.gpu is not None:
            return 1
        idle = metadata.instance_count - calls_in_flight
        return max(1, min(idle, texts // minimum))

    def calls_in_flight(self, metadata: ModelMetadata) -> int:
        """Merged calls the coalescer keeps in flight for the model. Without Triton's
        batcher: one running on each instance and one waiting for the first to free, so
        no instance waits for the gateway (``gateway_calls_in_flight`` where set: with
        several gateway workers, each keeps that many)."""
        if metadata.dynamic_batching:
            return self.settings.coalesce_in_flight
        return self.settings.gateway_calls_in_flight or metadata.instance_count + 1
