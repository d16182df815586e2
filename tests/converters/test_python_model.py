"""templates/python_model.py run in-process, with a fake triton_python_backend_utils."""

from __future__ import annotations

import ast

import numpy as np
import pytest
from google.protobuf import json_format

from converters import spec, triton_config
from converters.spec import ATTENTION_MASK, EMBEDDING, INPUT_IDS, TritonConfigOptions

VOCAB_SIZE = 50  # the mean_pool_onnx fixture's

@pytest.fixture
def table(mean_pool_onnx):
    return mean_pool_onnx.table


@pytest.fixture
def model(mean_pool_onnx, load_python_model):
    model_dir = mean_pool_onnx.path.parent.parent
    options = TritonConfigOptions(intra_op_threads=1, inter_op_threads=1)
    config = triton_config.build_text_model_config("tiny", mean_pool_onnx.table.shape[1], options)
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

    batched = model.execute(requests)
    alone = [model.execute([r])[0] for r in requests]

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
    model.execute([ragged_request([3], 0), ragged_request([7, 2], 1), ragged_request([4], 2)])

    assert calls == [{INPUT_IDS: (4, 7), ATTENTION_MASK: (4, 7)}]


def test_rows_are_sorted_by_length_into_sub_batches_padded_to_their_own_longest(
    mean_pool_onnx, load_python_model, table, ragged_request
):
    options = TritonConfigOptions(sub_batch_size=2, intra_op_threads=1)
    config = triton_config.build_text_model_config("tiny", table.shape[1], options)
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
    requests = [ragged_request([3], 0), ragged_request([7, 2], 1), ragged_request([4], 2)]
    responses = instance.execute(requests)

    # Lengths 3, 7, 2, 4 sorted: (2, 3) then (4, 7); each run padded to its own longest.
    assert calls == [(2, 3), (2, 7)]
    for response, req in zip(responses, requests):
        np.testing.assert_allclose(response.output(EMBEDDING), expected(table, req), atol=1e-5)


MALFORMED = {
    "shape-mismatch": ({INPUT_IDS: np.ones((2, 4), np.int64), ATTENTION_MASK: np.ones((2, 3), np.int64)}, "does not match"),
    "wrong-rank": ({INPUT_IDS: np.ones(4, np.int64), ATTENTION_MASK: np.ones(4, np.int64)}, "must be"),
    "missing-mask": ({INPUT_IDS: np.ones((1, 4), np.int64)}, "required"),
    "empty": ({INPUT_IDS: np.ones((1, 0), np.int64), ATTENTION_MASK: np.ones((1, 0), np.int64)}, "empty"),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_request_fails_alone(model, table, ragged_request, make_request, case):
    inputs, message = MALFORMED[case]
    good = [ragged_request([5, 3], 4), ragged_request([2], 5)]

    responses = model.execute([good[0], make_request(**inputs), good[1]])

    assert responses[1].has_error()
    assert message in responses[1].error.message()
    for response, req in zip([responses[0], responses[2]], good):
        assert not response.has_error()
        np.testing.assert_allclose(response.output(EMBEDDING), expected(table, req), atol=1e-5)


def test_thread_settings_come_from_the_config(model):
    options = model.session.get_session_options()
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (1, 1)


def test_template_names_match_the_contract(load_python_model):
    template = load_python_model()
    # Tensor names come from each model's config; only the file and parameter names are fixed.
    assert template.ONNX_FILE == spec.ONNX_FILE
    assert (
        template.ONNX_FILE_PARAMETER,
        template.INTRA_OP_PARAMETER,
        template.INTER_OP_PARAMETER,
        template.LENGTH_INPUT_PARAMETER,
        template.SUB_BATCH_PARAMETER,
    ) == (
        triton_config.ONNX_FILE_PARAMETER,
        triton_config.INTRA_OP_PARAMETER,
        triton_config.INTER_OP_PARAMETER,
        triton_config.LENGTH_INPUT_PARAMETER,
        triton_config.SUB_BATCH_PARAMETER,
    )


def test_template_imports_only_what_the_triton_stub_has(template_path):
    tree = ast.parse(template_path.read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    assert imported <= {"json", "os", "numpy", "onnxruntime", "triton_python_backend_utils"}
