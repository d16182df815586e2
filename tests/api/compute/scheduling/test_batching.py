"""The batching policy: the Triton options new models are converted with, and how the
gateway's coalescer treats a model given how it was published."""

import os
from types import SimpleNamespace

import pytest

from embedgate.api.compute.scheduling import batching
from embedgate.api.compute.scheduling.batching import BatchingPolicy
from embedgate.api.settings import Settings


# Whether the backend serves on a GPU, as the policy is told.
HOST = {"gpu": False}


@pytest.fixture(autouse=True)
def host_gpu():
    """The host has no GPU unless a test says it has: the policy, not this machine, is tested."""
    HOST["gpu"] = False
    return HOST


def on_this_host(settings: Settings) -> BatchingPolicy:
    return BatchingPolicy(settings, gpu=lambda: HOST["gpu"])


def options(library="sentence_transformers", **settings):
    return on_this_host(Settings(**settings)).triton_options(library)


def published(dynamic_batching: bool, instance_count: int = 2, max_batch_size: int = 256, gpu=None):
    return SimpleNamespace(
        dynamic_batching=dynamic_batching, instance_count=instance_count, max_batch_size=max_batch_size, gpu=gpu
    )


def test_without_tritons_batcher_the_coalescer_merges_all_that_fits_one_call():
    policy = BatchingPolicy(Settings(coalesce_max_texts=8, coalesce_in_flight=24))
    assert policy.coalesced_texts(published(False, max_batch_size=256)) == 256
    # One call running per instance and one waiting, unless set.
    assert policy.calls_in_flight(published(False, instance_count=2)) == 3
    assert BatchingPolicy(Settings(gateway_calls_in_flight=1)).calls_in_flight(published(False, instance_count=2)) == 1
    assert BatchingPolicy(Settings(gateway_calls_in_flight=1)).calls_in_flight(published(True)) == 24


def test_with_tritons_batcher_the_coalescer_merges_small_requests_only():
    policy = BatchingPolicy(Settings(coalesce_max_texts=8, coalesce_in_flight=24))
    assert policy.coalesced_texts(published(True)) == 8
    assert policy.calls_in_flight(published(True)) == 24


def test_a_request_is_spread_over_idle_cpu_instances_in_parts_of_at_least_the_minimum():
    policy = BatchingPolicy(Settings(spread_min_texts=8))
    four = published(False, instance_count=4)
    assert policy.spread(four, texts=32, calls_in_flight=0) == 4
    assert policy.spread(four, texts=32, calls_in_flight=1) == 3  # one instance is busy
    assert policy.spread(four, texts=20, calls_in_flight=0) == 2  # parts of at least 8
    assert policy.spread(four, texts=15, calls_in_flight=0) == 1
    assert policy.spread(four, texts=32, calls_in_flight=4) == 1  # every instance busy
    assert policy.spread(four, texts=32, calls_in_flight=5) == 1  # and a call waiting
    # Triton batches the model, its instances are GPUs, or spreading is off: one call.
    assert policy.spread(published(True, instance_count=4), texts=32, calls_in_flight=0) == 1
    assert policy.spread(published(False, instance_count=4, gpu=object()), texts=32, calls_in_flight=0) == 1
    assert BatchingPolicy(Settings(spread_min_texts=0)).spread(four, texts=32, calls_in_flight=0) == 1


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
    assert options("open_clip").dynamic_batching is True
    assert options(triton_form="onnxruntime").dynamic_batching is True


def test_explicit_instances_share_the_cores():
    chosen = options(instance_count=1)
    assert chosen.instance_count == 1 and chosen.intra_op_threads == (os.cpu_count() or 1)
    assert options(instance_count=3, ort_intra_op_threads=2).intra_op_threads == 2


def test_native_form_runs_one_gpu_instance_with_onnxruntimes_threads():
    chosen = options(triton_form="onnxruntime")
    assert (chosen.instance_count, chosen.intra_op_threads, chosen.instance_kind) == (1, 0, "gpu")


def test_on_a_gpu_host_sentence_transformers_get_two_gpu_instances_running_whole_calls(host_gpu):
    host_gpu["gpu"] = True
    chosen = options()
    assert (chosen.form, chosen.instance_kind, chosen.instance_count, chosen.intra_op_threads) == ("python", "gpu", 2, 1)
    # A whole call in one run unless padding costs more than a launch; the gateway still batches.
    assert (chosen.sub_batch_size, chosen.run_overhead_tokens) == (256, batching.GPU_RUN_OVERHEAD_TOKENS)
    assert chosen.dynamic_batching is False
    # Settings given explicitly win.
    assert options(sub_batch_size=32, run_overhead_tokens=100, instance_count=4).model_dump(
        include={"sub_batch_size", "run_overhead_tokens", "instance_count"}
    ) == {"sub_batch_size": 32, "run_overhead_tokens": 100, "instance_count": 4}


def test_on_a_gpu_host_clip_towers_go_to_the_gpu_and_variants_stay_on_cpu_instances(host_gpu):
    host_gpu["gpu"] = True
    policy = on_this_host(Settings())
    clip = policy.triton_options("open_clip")
    assert (clip.instance_kind, clip.instance_count, clip.dynamic_batching) == ("gpu", 2, True)
    assert policy.triton_options("sentence_transformers", "int8").instance_kind == "cpu"
    assert policy.triton_options("sentence_transformers", "int8").instance_count == (os.cpu_count() or 1)


def test_gpu_models_capture_cuda_graphs_unless_turned_off(host_gpu):
    host_gpu["gpu"] = True
    captured = options()
    assert captured.graph_rows and captured.graph_widths
    eager = options(gpu_cuda_graphs=False)
    assert (eager.graph_rows, eager.graph_widths) == ([], [])
    # Eager runs cost a launch per operation: worth more padding before a batch is cut.
    assert captured.run_overhead_tokens < eager.run_overhead_tokens


def test_instance_kind_cpu_keeps_a_gpu_host_on_cpu_and_gpu_asks_for_it_anywhere(host_gpu):
    host_gpu["gpu"] = True
    assert options(instance_kind="cpu").instance_kind == "cpu"
    host_gpu["gpu"] = False
    assert options().instance_kind == "cpu"
    assert options(instance_kind="gpu").instance_kind == "gpu"
