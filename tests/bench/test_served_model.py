"""The served model measured in-process: the repository's own model.py, with a stand-in
for Triton's utilities, on a tiny mean-pooling graph of the MiniLM tokenizer's vocabulary.
The real stub and ONNX file are measured by the sweep's integration test
(tests/integration/test_benchmark.py)."""

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from embedgate.bench import served_model
from embedgate.bench.inprocess import LocalModel
from embedgate.bench.payloads import SentencePayload
from embedgate.contract.spec import EMBEDDING, TritonConfigOptions
from embedgate.converters import triton_config
from tests.backend_model import BACKEND_MODEL, mean_pool_graph

VOCAB = 30522  # MiniLM's tokenizer


def publish(model_dir: Path, vocab: int, options: TritonConfigOptions) -> None:
    """A model directory as the converter lays one out: config, stub, its helper, graph."""
    import onnx

    version = model_dir / "1"
    version.mkdir(parents=True)
    table = np.random.default_rng(0).normal(size=(vocab, 4)).astype(np.float32)
    onnx.save(mean_pool_graph(table), str(version / "model.onnx"))
    shutil.copy(BACKEND_MODEL, version / served_model.STUB_FILE)
    for module in ("batch_layout.py", "torch_graphs.py"):
        shutil.copy(BACKEND_MODEL.parent / module, version / module)
    config = triton_config.build_text_model_config(model_dir.name, EMBEDDING, 4, options)
    (model_dir / "config.pbtxt").write_text(triton_config.render(config))


@pytest.fixture
def texts():
    payload = SentencePayload(1, seed=5)
    return [payload.inputs(index)[0] for index in range(40)]


def test_the_stub_answers_every_text_on_a_thread_per_worker(tmp_path, minilm_tokenizer, texts):
    options = TritonConfigOptions(instance_count=3, intra_op_threads=1, pack_width=0)
    publish(tmp_path / "tiny", VOCAB, options)
    model = LocalModel(tmp_path / "tiny" / "1" / "model.onnx", None, minilm_tokenizer, None, 1)

    measured = served_model.core_ms_per_text(model, texts, rows=7)

    assert measured["rows_per_request"] == 7 and measured["texts"] == 40 and measured["threads"] == 3
    assert measured["core_ms_per_text"] > 0 and measured["texts_per_s"] > 0
    # The stand-in for Triton's utilities is gone again: nothing else imports it by mistake.
    assert served_model.PB_UTILS not in sys.modules


def test_a_failing_run_is_reported_not_timed(tmp_path, minilm_tokenizer, texts):
    # A vocabulary smaller than the tokenizer's: onnxruntime's Gather fails on the ids.
    publish(tmp_path / "tiny", 50, TritonConfigOptions(intra_op_threads=1, pack_width=0))
    model = LocalModel(tmp_path / "tiny" / "1" / "model.onnx", None, minilm_tokenizer, None, 1)
    with pytest.raises(RuntimeError, match="the served model failed: onnxruntime failed"):
        served_model.core_ms_per_text(model, texts, rows=4)


def test_no_cpu_stub_no_measure(tmp_path, minilm_tokenizer, texts):
    gpu = TritonConfigOptions(instance_kind="gpu", intra_op_threads=1)
    publish(tmp_path / "gpu", VOCAB, gpu)  # its stub would run TorchScript on a GPU
    assert served_model.core_ms_per_text(LocalModel(tmp_path / "gpu" / "1" / "model.onnx", None, minilm_tokenizer, None, 1), texts, 4) is None
    # A repository fetched without its stub (or another server's files): nothing to run.
    assert served_model.core_ms_per_text(LocalModel(tmp_path / "none" / "1" / "model.onnx", None, minilm_tokenizer, None, 1), texts, 4) is None
