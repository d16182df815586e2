"""The late-chunking graph (``late.py``): published as a Triton model of its own beside a
mean-pooled model, its chunks equal to the library's token embeddings pooled over each span
then the modules after the Pooling; no graph (and the reason recorded) for a CLS model."""

from __future__ import annotations

import numpy as np
import pytest

from embedgate.contract.kinds.dense import DenseInfo, late_part_name
from embedgate.contract.preprocess.late_chunks import chunk_marks
from embedgate.contract.spec import CHUNK_EMBEDDINGS, ModelMetadata
from embedgate.converters.kinds.dense import late
from embedgate.converters.library import parity
from embedgate.converters.triton_config import parse
from tests import tiny_models
from tests.converters.conftest import run_converter


def _convert(root, build, name: str, **spec):
    model = build(root / name)
    run = run_converter({"model_name": f"org/{name}", "model_path": str(model), "triton_name": f"org--{name}",
                         "repository": str(root / "repository"), "late_chunking": True, **spec})
    assert run.returncode == 0, run.stderr[-3000:]
    return model, ModelMetadata.model_validate(run.last_line), root / "repository"


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    """Mean pooling, then Dense (tanh) and Normalize: modules after the Pooling."""
    return _convert(tmp_path_factory.mktemp("late"), tiny_models.bert_dense_model, "dense")


def test_a_mean_pooled_model_gets_the_graph_as_a_triton_model_of_its_own(dense):
    _, metadata, repository = dense
    record = metadata.record_of(DenseInfo)
    assert record.late_chunking.parity.passed and record.late_chunking.parity.min_cosine >= 0.9999
    assert record.late_chunking_refusal is None
    part = repository / late_part_name("org--dense")
    config = parse((part / "config.pbtxt").read_text())
    assert [entry.name for entry in config.input] == list(late.LATE_INPUTS)
    assert all(entry.allow_ragged_batch for entry in config.input)
    assert [(entry.name, list(entry.dims)) for entry in config.output] == [(CHUNK_EMBEDDINGS, [-1, 16])]
    assert (part / "1" / "model.onnx").exists() and (part / "metadata.json").exists()


def test_its_chunks_are_the_librarys_token_embeddings_pooled_then_the_modules_after(dense):
    """Chunks that overlap, of one token up to the whole text, several texts in one padded
    batch: each the mean of the library's token embeddings over its span, then Dense and
    Normalize, computed here with the library's own modules."""
    import torch
    from sentence_transformers import SentenceTransformer

    model_dir, _, repository = dense
    library = SentenceTransformer(str(model_dir), device="cpu")
    texts = ["a long text about towers, rivers and the sea beside them", "short one", "x"]
    features = library.preprocess(texts)
    ids = [row[mask.bool()].tolist() for row, mask in zip(features["input_ids"], features["attention_mask"])]
    spans = [[(1, 4), (3, 9), (8, len(ids[0]) - 1), (len(ids[0]) - 2, len(ids[0]))], [(0, 1), (1, len(ids[1]))], [(1, 2)]]
    run = parity.onnx_runner(repository / late_part_name("org--dense") / "1" / "model.onnx", CHUNK_EMBEDDINGS)
    feeds = parity.pad(ids)
    marks = [chunk_marks(feeds["input_ids"].shape[1], mine) for mine in spans]
    feeds["chunk_started"] = np.stack([started for started, _ in marks])
    feeds["chunk_ended"] = np.stack([ended for _, ended in marks])
    out = run(feeds)
    assert out.shape == (3, 4, 16)
    tokens = library.encode(texts, output_value="token_embeddings", convert_to_numpy=False)
    with torch.no_grad():
        for row, mine in enumerate(spans):
            pooled = torch.stack([tokens[row][start:end].mean(dim=0) for start, end in mine])
            expected = library[3](library[2]({"sentence_embedding": pooled}))["sentence_embedding"].numpy()
            assert parity.cosines(out[row, : len(mine)], expected).min() >= 0.9999
            assert not out[row, len(mine):].any()  # zeros past a row's own chunks


def test_a_cls_model_has_no_graph_and_says_why(tmp_path):
    _, metadata, repository = _convert(tmp_path, tiny_models.bert_cls_model, "cls")
    record = metadata.record_of(DenseInfo)
    assert record.late_chunking is None
    assert "'cls', not the mean of the tokens" in record.late_chunking_refusal
    assert not (repository / late_part_name("org--cls")).exists()
    assert (repository / "org--cls" / "config.pbtxt").exists()


def test_check_spans_are_edges_and_overlapping_thirds_in_order():
    assert late.spans_of(11) == [(1, 2), (1, 5), (4, 8), (7, 10), (9, 10)]
    assert late.spans_of(2) == [(0, 1), (0, 2), (1, 2)]
    for length in range(1, 40):
        chunk_marks(length, late.spans_of(length))  # in order: the graph's marks take them


def test_refusals():
    assert "Router" in late.refusal([], routed=True)
    assert "not a Pooling" in late.refusal(["transformer", "dense"], routed=False)
