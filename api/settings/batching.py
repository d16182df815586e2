"""Dynamic batching and instances, written into each new model's Triton config when it is
converted: batch sizes, sub-batches and packing of the Python form, the queue, instance
count and kind, the GPU's float16 graphs and CUDA graphs, onnxruntime's threads."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class BatchingSettings(BaseModel):
    max_batch_size: int = Field(256, ge=1, le=4096, description="Triton max_batch_size of new models.")
    sub_batch_size: int = Field(
        64, ge=1, le=4096,
        description="Python form: a dynamic batch's texts, sorted by length, run in sub-batches of at most this many.",
    )
    run_overhead_tokens: float = Field(
        32.0, ge=0, le=100_000,
        description="Python form: the fixed cost of one onnxruntime run, in padded tokens, that decides where "
        "a sorted batch is cut into sub-batches (0: fixed sub-batches of sub_batch_size).",
    )
    pack_width: int = Field(
        48, ge=0, le=4096,
        description="Python form: a dynamic batch whose texts all fit in this many tokens runs through the "
        "model's packed graph, its texts laid end to end in rows this wide (0: never).",
    )
    max_queue_delay_us: int = Field(
        2000, ge=0, description="Dynamic batcher: longest wait to fill a batch (microseconds)."
    )
    triton_max_queue_size: int = Field(1024, ge=0, description="Requests queued in Triton per model before it rejects (503).")
    instance_count: int = Field(
        0, ge=0,
        description="Batches a model runs at once; 0: one per CPU core ('python' on CPU: one Triton instance, "
        "a thread per batch, one copy of the model), 2 ('python' on a GPU: Triton instances), 1 ('onnxruntime').",
    )
    instance_kind: Literal["auto", "cpu", "gpu"] = Field(
        "auto",
        description="Triton instance kind of new models; auto: GPU where the host has an NVIDIA GPU and PyTorch "
        "with CUDA ('python': sentence-transformers models, traced for the GPU at conversion), else CPU; "
        "GPU for 'onnxruntime'.",
    )
    late_chunking: bool = Field(
        False,
        description="Publish each new sentence-transformer's late-chunking graph beside it (mean pooling only: "
        "a Triton model of its own, a second copy of the weights in memory), so that requests may ask for late "
        "chunks; a model converted without one is converted again when it is next loaded.",
    )
    gpu_float16: bool = Field(True, description="GPU instances: publish a sentence-transformer's float16 graph where "
                              "it keeps gpu_half_parity_threshold against the float32 PyTorch model (false: float32 "
                              "graphs only).")
    gpu_cuda_graphs: bool = Field(True, description="GPU instances: capture each model's forward as CUDA graphs "
                                  "of bucketed shapes when it loads (false: eager PyTorch, a launch per operation).")
    gpu_half_parity_threshold: float = Field(0.999, gt=0, le=1, description="GPU instances: the least cosine a "
                                             "float16 graph must keep against PyTorch.")
    ort_intra_op_threads: int = Field(
        0, ge=0, description="onnxruntime threads per instance; 0: cores / instances ('python'), onnxruntime's choice ('onnxruntime')."
    )
