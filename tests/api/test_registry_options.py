"""The Triton options new models are converted with."""

import os

from api.registry import ModelRegistry
from api.settings import Settings


def options(kind="sentence_transformer", **settings):
    return ModelRegistry(Settings(**settings), client=None)._triton_options(kind)


def test_python_form_defaults_to_one_single_threaded_instance_per_core():
    chosen = options()
    assert chosen.instance_count == (os.cpu_count() or 1)
    assert chosen.intra_op_threads == 1
    assert chosen.instance_kind == "cpu"
    assert (chosen.max_batch_size, chosen.sub_batch_size, chosen.run_overhead_tokens) == (256, 64, 32)
    assert chosen.pack_width == 48 and options(pack_width=0).pack_width == 0


def test_the_gateway_batches_python_form_sentence_transformers_and_triton_the_rest():
    assert options().dynamic_batching is False
    assert options(gateway_batching=False).dynamic_batching is True
    # CLIP image requests are not merged in the gateway; native (GPU) instances keep Triton's batcher.
    assert options("clip").dynamic_batching is True
    assert options(triton_form="onnxruntime").dynamic_batching is True


def test_explicit_instances_share_the_cores():
    chosen = options(instance_count=1)
    assert chosen.instance_count == 1 and chosen.intra_op_threads == (os.cpu_count() or 1)
    assert options(instance_count=3, ort_intra_op_threads=2).intra_op_threads == 2


def test_native_form_runs_one_gpu_instance_with_onnxruntimes_threads():
    chosen = options(triton_form="onnxruntime")
    assert (chosen.instance_count, chosen.intra_op_threads, chosen.instance_kind) == (1, 0, "gpu")
