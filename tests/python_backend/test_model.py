"""python_backend/model.py run in-process, with a fake triton_python_backend_utils."""

from __future__ import annotations

import itertools
import threading

import numpy as np
import pytest
from google.protobuf import json_format

from embedgate.contract.spec import ATTENTION_MASK, EMBEDDING, INPUT_IDS, TritonConfigOptions
from embedgate.converters import triton_config
from tests.backend_model import FINAL_FLAG

VOCAB_SIZE = 50  # the mean_pool_onnx fixture's

@pytest.fixture
def table(mean_pool_onnx):
    return mean_pool_onnx.table


@pytest.fixture
def model(mean_pool_onnx, load_python_model):
    model_dir = mean_pool_onnx.path.parent.parent
    options = TritonConfigOptions(intra_op_threads=1, inter_op_threads=1)
    config = triton_config.build_text_model_config("tiny", EMBEDDING, mean_pool_onnx.table.shape[1], options)
    # Triton hands model.py its config as JSON with proto field names.
    config_json = json_format.MessageToJson(config, preserving_proto_field_name=True)
    instance = load_python_model().TritonPythonModel()
    instance.initialize(
        {"model_config": config_json, "model_repository": str(model_dir), "model_version": "1"}
    )
    yield instance
    instance.finalize()


@pytest.fixture
def ragged_request(make_request):
    return lambda lengths, seed: random_request(make_request, lengths, seed)


def random_request(make_request, lengths: list[int], seed: int):
    rng = np.random.default_rng(seed)
    width = max(lengths)
    ids = rng.integers(1, VOCAB_SIZE, size=(len(lengths), width), dtype=np.int64)
    mask = (np.arange(width)[None, :] < np.array(lengths)[:, None]).astype(np.int64)
    return make_request(**{INPUT_IDS: ids * mask, ATTENTION_MASK: mask})


def expected(table: np.ndarray, req) -> np.ndarray:
    ids, mask = (t.as_numpy() for t in req.inputs)
    return (table[ids] * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)


def test_a_dynamic_batch_matches_each_request_alone(model, table, ragged_request):
    requests = [ragged_request([3], 0), ragged_request([7, 2, 5], 1), ragged_request([1, 1], 2), ragged_request([12], 3)]

    batched = model.answer(requests)
    alone = [model.answer([r])[0] for r in requests]

    assert len(batched) == len(requests)
    for req, together, single in zip(requests, batched, alone):
        assert not together.has_error()
        assert together.output(EMBEDDING).dtype == np.float32
        assert together.output(EMBEDDING).shape == (len(req.inputs[0].as_numpy()), table.shape[1])
        np.testing.assert_allclose(together.output(EMBEDDING), single.output(EMBEDDING), atol=1e-6)
        np.testing.assert_allclose(together.output(EMBEDDING), expected(table, req), atol=1e-5)


def test_one_onnxruntime_call_per_dynamic_batch(model, ragged_request):
    calls = []
    real_run = model.session.run

    class CountingSession:
        def run(self, outputs, feeds):
            calls.append({name: array.shape for name, array in feeds.items()})
            return real_run(outputs, feeds)

    model.session = CountingSession()
    model.answer([ragged_request([3], 0), ragged_request([7, 2], 1), ragged_request([4], 2)])

    assert calls == [{INPUT_IDS: (4, 7), ATTENTION_MASK: (4, 7)}]


def test_rows_are_sorted_by_length_into_sub_batches_padded_to_their_own_longest(
    mean_pool_onnx, load_python_model, table, ragged_request
):
    # run_overhead_tokens 0: fixed runs of sub_batch_size rows.
    instance, calls = recording_model(mean_pool_onnx, load_python_model, table, sub_batch_size=2, run_overhead_tokens=0)
    requests = [ragged_request([3], 0), ragged_request([7, 2], 1), ragged_request([4], 2)]
    responses = instance.answer(requests)

    # Lengths 3, 7, 2, 4 sorted: (2, 3) then (4, 7); each run padded to its own longest.
    assert calls == [(2, 3), (2, 7)]
    for response, req in zip(responses, requests):
        np.testing.assert_allclose(response.output(EMBEDDING), expected(table, req), atol=1e-5)


def test_runs_are_cut_where_padding_would_cost_more_than_another_run(
    mean_pool_onnx, load_python_model, table, ragged_request
):
    instance, calls = recording_model(mean_pool_onnx, load_python_model, table, sub_batch_size=64, run_overhead_tokens=8)
    requests = [ragged_request([30], 0), ragged_request([3, 2], 1), ragged_request([4, 3], 2), ragged_request([29], 3)]
    responses = instance.answer(requests)

    # Sorted 2, 3, 3, 4, 29, 30: one run of six would compute 180 tokens; (4 rows x 4) and
    # (2 rows x 30) compute 76, plus 8 for the second run.
    assert calls == [(4, 4), (2, 30)]
    for response, req in zip(responses, requests):
        np.testing.assert_allclose(response.output(EMBEDDING), expected(table, req), atol=1e-5)


def recording_model(mean_pool_onnx, load_python_model, table, **options):
    """A model instance whose onnxruntime calls are recorded as the mask's shape."""
    config = triton_config.build_text_model_config(
        "tiny", EMBEDDING, table.shape[1], TritonConfigOptions(intra_op_threads=1, **options)
    )
    instance = load_python_model().TritonPythonModel()
    instance.initialize(
        {
            "model_config": json_format.MessageToJson(config, preserving_proto_field_name=True),
            "model_repository": str(mean_pool_onnx.path.parent.parent),
            "model_version": "1",
        }
    )
    calls = []
    real_run = instance.session.run

    class RecordingSession:
        def run(self, outputs, feeds):
            calls.append(feeds[ATTENTION_MASK].shape)
            return real_run(outputs, feeds)

    instance.session = RecordingSession()
    return instance, calls


def run_cost(lengths, runs, overhead):
    return sum(overhead + (end - start) * lengths[end - 1] for start, end in runs)


@pytest.mark.parametrize("seed", range(40))
def test_the_cut_is_the_cheapest_one(load_python_model, seed):
    plan = load_python_model().plan_sub_batches
    rng = np.random.default_rng(seed)
    lengths = np.sort(rng.integers(1, 40, size=int(rng.integers(1, 9))))
    overhead, max_rows = float(rng.integers(0, 60)) + 0.5, int(rng.integers(1, 6))

    runs = plan(lengths, max_rows, overhead)

    # Contiguous, in order, covering every row once, none longer than max_rows.
    assert [start for start, _ in runs] == [0] + [end for _, end in runs[:-1]]
    assert runs[-1][1] == len(lengths)
    assert all(0 < end - start <= max_rows for start, end in runs)
    # No other cut (every subset of the gaps between rows) costs less.
    count = len(lengths)
    cheapest = min(
        run_cost(lengths, list(zip((0, *cuts), (*cuts, count))), overhead)
        for mask in range(2 ** (count - 1))
        for cuts in [tuple(i for i in range(1, count) if mask >> (i - 1) & 1)]
        if all(end - start <= max_rows for start, end in zip((0, *cuts), (*cuts, count)))
    )
    assert run_cost(lengths, runs, overhead) == pytest.approx(cheapest)


def cheapest_cost(lengths, max_rows, overhead):
    """The least cost of any cut, by the plain dynamic programme over every row."""
    best = [0.0] + [float("inf")] * len(lengths)
    for end in range(1, len(lengths) + 1):
        for start in range(max(0, end - max_rows), end):
            best[end] = min(best[end], best[start] + overhead + (end - start) * lengths[end - 1])
    return best[-1]


@pytest.mark.parametrize("seed", range(30))
def test_a_batch_that_fits_one_run_is_cut_as_cheaply_as_any_cut_over_every_row(load_python_model, seed):
    """A GPU instance's batches (every row may go in one run): the shortcuts find a cut
    as cheap as the search over every row, on batches of up to 300 rows."""
    plan = load_python_model().plan_sub_batches
    rng = np.random.default_rng(100 + seed)
    lengths = np.sort(rng.integers(1, int(rng.integers(2, 200)), size=int(rng.integers(1, 300))))
    overhead = float(rng.choice([0.5, 32.0, 300.0, 2048.0, 5000.0]))
    max_rows = len(lengths) + int(rng.integers(0, 50))

    runs = plan(lengths, max_rows, overhead)

    assert [start for start, _ in runs] == [0] + [end for _, end in runs[:-1]]
    assert runs[-1][1] == len(lengths)
    assert run_cost(lengths, runs, overhead) == pytest.approx(cheapest_cost(lengths.tolist(), max_rows, overhead))


def test_a_batch_whose_padding_costs_less_than_a_run_is_one_run(load_python_model):
    plan = load_python_model().plan_sub_batches
    lengths = np.array([8] * 40 + [30] * 10)  # 880 padded tokens
    assert plan(lengths, 64, 2048.0) == [(0, 50)]
    assert plan(lengths, 64, 32.0) == [(0, 40), (40, 50)]


def test_equal_lengths_make_as_few_runs_as_allowed(load_python_model):
    plan = load_python_model().plan_sub_batches
    runs = plan(np.full(10, 12), 4, 32.0)
    assert len(runs) == 3 and all(end - start <= 4 for start, end in runs)
    assert plan(np.full(10, 12), 64, 32.0) == [(0, 10)]
    assert plan(np.array([5, 6, 7]), 2, 0) == [(0, 2), (2, 3)]


def first_fit_slots(lengths, width):
    """Token slots of first fit decreasing, the simplest packing: rows times the fullest."""
    room = []
    for length in sorted(lengths, reverse=True):
        fits = [row for row, free in enumerate(room) if length <= free]
        if fits:
            room[fits[0]] -= length
        else:
            room.append(width - length)
    return len(room) * (width - min(room))


def slots(lengths, rows):
    return len(rows) * max(int(lengths[row].sum()) for row in rows)


@pytest.mark.parametrize("seed", range(30))
def test_packed_rows_hold_every_text_once_within_the_width_in_no_more_slots_than_first_fit(
    load_python_model, seed
):
    pack_rows = load_python_model().pack_rows
    rng = np.random.default_rng(seed)
    width = int(rng.integers(8, 64))
    lengths = rng.integers(1, width + 1, size=int(rng.integers(1, 80)))

    rows = pack_rows(lengths, width)

    assert sorted(text for row in rows for text in row) == list(range(len(lengths)))
    assert all(row and lengths[row].sum() <= width for row in rows)
    assert slots(lengths, rows) <= first_fit_slots(lengths.tolist(), width)


def test_a_few_texts_are_balanced_across_rows(load_python_model):
    pack_rows = load_python_model().pack_rows
    # First fit fills one row to 48 and the other to 46: 96 slots. Balanced rows hold 47.
    assert first_fit_slots([25, 24, 23, 22], 48) == 96
    assert pack_rows(np.array([25, 24, 23, 22]), 48) == [[0, 3], [1, 2]]
    # Three rows of 30 (90 slots) beat two full ones (96).
    assert pack_rows(np.array([10, 30, 20, 18, 10]), 48) == [[1], [2, 4], [3, 0]]


def test_many_texts_fill_rows_to_the_brim(load_python_model):
    pack_rows = load_python_model().pack_rows
    lengths = np.array([16] * 9 + [8] * 6)  # 192 tokens: four rows of 48 exactly
    rows = pack_rows(lengths, 48)
    assert slots(lengths, rows) == 192


def test_a_config_naming_a_torch_file_runs_that_graph_with_pytorch(mean_pool_onnx, load_python_model, ragged_request):
    """GPU instances: the TorchScript graph (here traced on the CPU, with torch_device cpu)
    gets the batches onnxruntime would, and answers what the ONNX graph answers."""
    import torch

    from embedgate.contract.spec import TORCH_FILE

    table = torch.from_numpy(mean_pool_onnx.table)

    class MeanPool(torch.nn.Module):
        def forward(self, input_ids, attention_mask):
            mask = attention_mask.unsqueeze(-1).float()
            return (table[input_ids] * mask).sum(1) / mask.sum(1).clamp(min=1e-9)

    model_dir = mean_pool_onnx.path.parent.parent
    example = (torch.ones(2, 3, dtype=torch.int64), torch.ones(2, 3, dtype=torch.int64))
    torch.jit.save(torch.jit.trace(MeanPool(), example), str(model_dir / "1" / TORCH_FILE))
    dim = mean_pool_onnx.table.shape[1]

    def loaded(options):
        config = triton_config.build_text_model_config("tiny", EMBEDDING, dim, options)
        if "torch_device" in config.parameters:
            config.parameters["torch_device"].string_value = "cpu"
        instance = load_python_model().TritonPythonModel()
        instance.initialize(
            {
                "model_config": json_format.MessageToJson(config, preserving_proto_field_name=True),
                "model_repository": str(model_dir),
                "model_version": "1",
                "model_instance_name": "tiny_0",
            }
        )
        return instance

    on_torch = loaded(TritonConfigOptions(instance_kind="gpu", intra_op_threads=1))
    on_onnx = loaded(TritonConfigOptions(intra_op_threads=1, pack_width=0))
    assert on_torch.torch is not None and on_onnx.torch is None
    requests = [ragged_request(lengths, seed) for seed, lengths in enumerate([[3, 9, 1], [12], [5, 5]])]

    for torch_answer, onnx_answer in zip(on_torch.answer(requests), on_onnx.answer(requests)):
        assert not torch_answer.has_error()
        np.testing.assert_allclose(torch_answer.output(EMBEDDING), onnx_answer.output(EMBEDDING), rtol=1e-5, atol=1e-6)

    class OutOfMemory:
        def run(self, feeds):
            raise RuntimeError("CUDA out of memory")

    on_torch.torch = OutOfMemory()
    assert [answer.error.message() for answer in on_torch.answer(requests[:2])] == ["PyTorch failed: CUDA out of memory"] * 2


def test_model_py_reads_the_parameters_the_config_writer_names(load_python_model):
    module = load_python_model()
    names = {key: value for key, value in vars(triton_config).items() if key.endswith("_PARAMETER")}

    assert names
    for key, value in names.items():
        assert getattr(module, key) == value, key


def decoupled_model(mean_pool_onnx, load_python_model, threads):
    """A CPU model as published: decoupled, ``threads`` batches at once."""
    config = triton_config.build_text_model_config(
        "tiny", EMBEDDING, mean_pool_onnx.table.shape[1], TritonConfigOptions(intra_op_threads=1, instance_count=threads)
    )
    assert config.model_transaction_policy.decoupled
    instance = load_python_model().TritonPythonModel()
    instance.initialize(
        {
            "model_config": json_format.MessageToJson(config, preserving_proto_field_name=True),
            "model_repository": str(mean_pool_onnx.path.parent.parent),
            "model_version": "1",
        }
    )
    return instance


def final_answer(req, timeout=10.0):
    assert req.sender.done.wait(timeout), "no final response"
    [(response, flags)] = req.sender.sent
    assert flags == FINAL_FLAG
    return response


def test_a_decoupled_model_answers_each_request_once_through_its_sender(
    mean_pool_onnx, load_python_model, table, ragged_request, make_request
):
    instance = decoupled_model(mean_pool_onnx, load_python_model, threads=2)
    try:
        requests = [ragged_request([3, 5], 0), ragged_request([7], 1)]
        malformed = make_request(**{INPUT_IDS: np.ones((1, 3), dtype=np.int64)})

        assert instance.execute(requests[:1]) is None
        assert instance.execute([requests[1], malformed]) is None

        for req in requests:
            response = final_answer(req)
            assert not response.has_error()
            np.testing.assert_allclose(response.output(EMBEDDING), expected(table, req), atol=1e-5)
        assert "attention_mask is required" in final_answer(malformed).error.message()
    finally:
        instance.finalize()


def test_threads_run_batches_side_by_side_and_execute_returns_once_one_is_free(
    mean_pool_onnx, load_python_model, table, ragged_request
):
    instance = decoupled_model(mean_pool_onnx, load_python_model, threads=2)
    real_run = instance.session.run
    release = threading.Event()
    lock = threading.Lock()
    running = {"now": 0, "most": 0}
    both_running = threading.Event()

    class GatedSession:
        def run(self, outputs, feeds):
            with lock:
                running["now"] += 1
                running["most"] = max(running["most"], running["now"])
                if running["now"] == 2:
                    both_running.set()
            release.wait(10)
            try:
                return real_run(outputs, feeds)
            finally:
                with lock:
                    running["now"] -= 1

    instance.session = GatedSession()
    try:
        first, second = ragged_request([4], 0), ragged_request([6], 1)
        instance.execute([first])  # a thread is still free: returns at once
        returned = threading.Event()
        submitter = threading.Thread(target=lambda: (instance.execute([second]), returned.set()))
        submitter.start()

        assert both_running.wait(10), "the second batch did not run beside the first"
        # Both threads are busy: execute holds on, so Triton keeps (and merges) the next
        # requests in its own queue.
        assert not returned.wait(0.2)
        release.set()
        assert returned.wait(10)
        submitter.join(10)
        for req in (first, second):
            np.testing.assert_allclose(final_answer(req).output(EMBEDDING), expected(table, req), atol=1e-5)
        assert running["most"] == 2
    finally:
        release.set()
        instance.finalize()


def test_a_batch_that_fails_answers_each_of_its_requests_with_the_error(
    mean_pool_onnx, load_python_model, ragged_request
):
    instance = decoupled_model(mean_pool_onnx, load_python_model, threads=1)

    class FailingSession:
        def run(self, outputs, feeds):
            raise RuntimeError("out of memory")

    instance.session = FailingSession()
    try:
        requests = [ragged_request([3], 0), ragged_request([5], 1)]
        instance.execute(requests)
        for req in requests:
            assert "out of memory" in final_answer(req).error.message()
    finally:
        instance.finalize()


@pytest.mark.parametrize(
    ("rows", "parts"),
    [
        ([3], [[3]]),
        ([8, 8, 8], [[8, 8], [8]]),
        ([8, 8, 8, 8], [[8, 8], [8, 8]]),
        ([1, 100], [[1], [100]]),
        ([100, 1, 1], [[100], [1, 1]]),
    ],
)
def test_a_batch_of_several_requests_is_cut_into_a_part_per_thread_of_about_equal_rows(
    mean_pool_onnx, load_python_model, ragged_request, rows, parts
):
    instance = decoupled_model(mean_pool_onnx, load_python_model, threads=2)
    try:
        requests = [ragged_request([3] * n, seed) for seed, n in enumerate(rows)]
        cut = instance.part_threads._parts(requests)
        assert [[instance._rows(r) for r in part] for part in cut] == parts
        assert [r for part in cut for r in part] == requests  # every request once, in order
    finally:
        instance.finalize()


def test_a_merged_batch_runs_on_both_threads(mean_pool_onnx, load_python_model, table, ragged_request):
    """Triton's dynamic batcher hands a freed thread everything queued; the batch is cut so
    that the other thread runs its half."""
    instance = decoupled_model(mean_pool_onnx, load_python_model, threads=2)
    real_run = instance.session.run
    both_running = threading.Barrier(2, timeout=10)
    runs = itertools.count()

    class MeetingSession:
        def run(self, outputs, feeds):
            if next(runs) < 2:
                both_running.wait()  # breaks (and fails the requests) unless the first two runs meet
            return real_run(outputs, feeds)

    instance.session = MeetingSession()
    try:
        requests = [ragged_request([4, 5], seed) for seed in range(4)]
        instance.execute(requests)
        for req in requests:
            response = final_answer(req)
            assert not response.has_error(), response.error.message()
            np.testing.assert_allclose(response.output(EMBEDDING), expected(table, req), atol=1e-5)
    finally:
        instance.finalize()


@pytest.mark.parametrize(
    ("rows", "count", "part_rows", "parts"),
    [
        ([8, 8, 8, 8], 2, 0, [[0, 1], [2, 3]]),
        ([8, 8, 8, 8], 2, 16, [[0, 1], [2, 3]]),
        ([8] * 8, 2, 16, [[0, 1], [2, 3], [4, 5], [6, 7]]),  # 64 images: 4 parts of 16
        ([4] * 10, 2, 16, [[0, 1, 2], [3, 4, 5, 6], [7, 8, 9]]),  # 40 rows: 3 parts, none over 16
        ([64, 64], 2, 16, [[0], [1]]),  # never more parts than requests
        ([5], 4, 16, [[0]]),
    ],
)
def test_fixed_shape_rows_are_cut_into_parts_of_a_few_rows(rows, count, part_rows, parts):
    from embedgate.python_backend.batch_layout import split_requests

    assert split_requests(rows, count, part_rows) == parts
