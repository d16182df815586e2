"""The native ONNX Runtime form (NVIDIA's GPU container), checked without that container:
the converter's config.pbtxt parses as ``ModelConfig`` and agrees with the ONNX graph it
sits beside, and requests padded to sequence-length buckets (what the gateway sends this
form) stack into one batch, as Triton's batcher stacks equal shapes, with unchanged results.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from tritonclient.grpc import model_config_pb2 as pb

from embedgate.contract.preprocess.text import TextTokenizer, bucket_length
from embedgate.contract.spec import METADATA_FILE, ONNX_FILE, TOKENIZER_DIR, ModelMetadata
from embedgate.converters.triton_config import parse
from tests import tiny_models
from tests.helpers import cosine_rows

ONNX_TYPES = {onnx.TensorProto.INT64: pb.TYPE_INT64, onnx.TensorProto.FLOAT: pb.TYPE_FP32}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A tiny dense model (a conversion of seconds): what is checked here is the form's
    config, graph and batching, not MiniLM's numbers."""
    return tiny_models.dense_model(tmp_path_factory.mktemp("native_model") / "model", seed=8)


@pytest.fixture(scope="module")
def native(tmp_path_factory, run_conversion, tiny) -> Path:
    repository = tmp_path_factory.mktemp("native_repository")
    spec = {
        "model_name": "org/tiny",
        "model_path": str(tiny),
        "triton_name": "tiny",
        "repository": str(repository),
        "triton": {"form": "onnxruntime", "instance_kind": "gpu", "max_batch_size": 32},
    }
    run = run_conversion(spec)
    assert run.returncode == 0, run.stderr
    return repository / "tiny"


def test_config_parses_and_matches_the_onnx_graph(native):
    config = parse((native / "config.pbtxt").read_text())
    graph = onnx.load(str(native / "1" / ONNX_FILE), load_external_data=False).graph

    assert config.platform == "onnxruntime_onnx" and config.default_model_filename == ONNX_FILE
    assert not (native / "1" / "model.py").exists()
    assert config.max_batch_size == 32 and config.HasField("dynamic_batching")
    assert [g.kind for g in config.instance_group] == [pb.ModelInstanceGroup.KIND_GPU]
    onnx_tensors = {t.name: t for t in [*graph.input, *graph.output]}
    for tensor in [*config.input, *config.output]:
        onnx_type = onnx_tensors[tensor.name].type.tensor_type
        assert ONNX_TYPES[onnx_type.elem_type] == tensor.data_type, tensor.name
        # The ONNX Runtime backend's load-time check: with max_batch_size > 0 the graph's
        # first axis must be free (the batch); the other axes must have the config's rank,
        # and a fixed graph axis must equal the config's (a free one accepts any).
        batch, *rest = onnx_type.shape.dim
        assert not batch.HasField("dim_value"), tensor.name
        assert len(rest) == len(tensor.dims), tensor.name
        for axis, dim in zip(rest, tensor.dims):
            assert not axis.HasField("dim_value") or axis.dim_value == dim, tensor.name


def test_bucketed_requests_batch_together_and_match_pytorch(native, tiny):
    from sentence_transformers import SentenceTransformer

    metadata = ModelMetadata.model_validate_json((native / METADATA_FILE).read_text())
    tokenizer = TextTokenizer(
        native / TOKENIZER_DIR / "tokenizer.json", metadata.max_seq_length, metadata.strip_whitespace
    )
    # Of the tiny model's own words (tests/tiny_transformers.WORDS, a token each).
    texts = [
        "hello world",
        "the quick brown fox jumps over the lazy dog",
        "a man is eating food at the bank and the stocks fell",
        "the model server is a search server for text and the query is a document with an embedding of the world",
        "an awesome movie with a lazy dog " * 20,  # truncated to the max length, the last bucket
    ]
    # One request per text, tokenized as the gateway does for this form.
    requests = [tokenizer.encode([text], pad_to_bucket=True) for text in texts]
    for request in requests:
        width = request.input_ids.shape[1]
        assert width == bucket_length(request.token_counts[0], metadata.max_seq_length)

    # Triton's native batcher stacks requests whose shapes are equal.
    batches: dict[int, list[int]] = defaultdict(list)
    for index, request in enumerate(requests):
        batches[request.input_ids.shape[1]].append(index)
    assert len(batches) < len(texts), "bucketing put no two requests of different lengths together"
    assert any(
        len({requests[i].token_counts[0] for i in members}) > 1 for members in batches.values()
    ), "no bucket holds requests of different lengths"

    session = ort.InferenceSession(str(native / "1" / ONNX_FILE), providers=["CPUExecutionProvider"])
    served = np.zeros((len(texts), metadata.embedding_dim), dtype=np.float32)
    for members in batches.values():
        feeds = {
            "input_ids": np.concatenate([requests[i].input_ids for i in members]),
            "attention_mask": np.concatenate([requests[i].attention_mask for i in members]),
        }
        (output,) = session.run(["embedding"], feeds)
        served[members] = output
    library = SentenceTransformer(str(tiny), device="cpu")
    assert cosine_rows(served, library.encode(texts)).min() >= 0.9999
