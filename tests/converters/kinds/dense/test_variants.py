"""Load-time variants: '@optimized' (graph fusion) and '@int8' (dynamic quantization).

The real MiniLM variants are built through ``python -m converters`` with the spec a
gateway of default settings sends for them (``api/models/specs.py``), once per run: here,
or by the session gateway of the integration tests that load them, whichever comes first
(``tests/run_shared.py``). They are checked against the PyTorch model on sentences the
converter never saw; the refusals below a threshold run on a tiny model (the same code
path, in seconds); the int8 planning is checked on a small graph where the answer is known.
"""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from pydantic import ValidationError

from embedgate.contract.errors import ParityError
from embedgate.contract.preprocess.text import TextTokenizer
from embedgate.contract.repository.publish import STAGING_DIR
from embedgate.contract.spec import ATTENTION_MASK, EMBEDDING, INPUT_IDS, ConversionSpec, ModelMetadata
from embedgate.converters import weights
from embedgate.converters.kinds.dense import int8, variants
from embedgate.converters.library import parity
from embedgate.converters.triton_config import parse
from tests import tiny_models
from tests.converters.conftest import MINILM, run_converter
from tests.helpers import cosine_rows
from tests.run_shared import published_once

TRITON_NAME = "sentence-transformers--all-MiniLM-L6-v2"

# Not the parity sentences: what the variants must also get right.
UNSEEN = [
    "A man is eating food.",
    "The new movie is awesome, everyone should watch it.",
    "Stocks fell sharply after the central bank raised interest rates again.",
    "How do I reset my password if I no longer have access to my email?",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "ok",
    "The quarterly report, due Friday, covers revenue, costs and hiring plans for 2025.",
    "Ich habe heute keine Zeit, aber morgen gerne.",
    " ".join(["long input that will be truncated"] * 80),
    "Two dogs are playing in the snow near a red barn while children watch.",
]


def _gateway_spec(repository, variant) -> dict:
    """The conversion a gateway of default settings asks for ``MiniLM@<variant>``."""
    from embedgate.api.compute.scheduling.batching import BatchingPolicy
    from embedgate.api.models.refs import ModelRef
    from embedgate.api.models.specs import conversion_spec
    from embedgate.api.settings import Settings

    settings = Settings()
    ref = ModelRef.named(f"{MINILM}@{variant}")
    return conversion_spec(settings, str(repository), BatchingPolicy(settings), ref).model_dump(mode="json")


def _spec(repository, variant, **extra) -> dict:
    return {
        "model_name": MINILM,
        "triton_name": f"minilm---{variant}",
        "repository": str(repository),
        "variant": variant,
        **extra,
    }


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    return tmp_path_factory.mktemp("variants")


def _published(repository, run_dir, variant) -> Path:
    name = f"{TRITON_NAME}---{variant}"

    def convert() -> None:
        run = run_converter(_gateway_spec(repository, variant))
        assert run.returncode == 0, run.stderr[-3000:]

    published_once(run_dir, name, repository, convert)
    return repository / name


@pytest.fixture(scope="module")
def optimized(repository, run_dir):
    return _published(repository, run_dir, "optimized")


@pytest.fixture(scope="module")
def quantized(repository, run_dir):
    return _published(repository, run_dir, "int8")


def _metadata(directory) -> ModelMetadata:
    return ModelMetadata.model_validate_json((directory / "metadata.json").read_text())


def _embed(directory, texts: list[str]) -> np.ndarray:
    """The served path, replayed: the published tokenizer, then the published ONNX."""
    metadata = _metadata(directory)
    tokenizer = TextTokenizer(directory / "tokenizer" / "tokenizer.json", metadata.max_seq_length, metadata.strip_whitespace)
    tokens = tokenizer.encode(texts)
    session = ort.InferenceSession(str(directory / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    (vectors,) = session.run([EMBEDDING], {INPUT_IDS: tokens.input_ids, ATTENTION_MASK: tokens.attention_mask})
    return vectors


def _ops(directory) -> collections.Counter:
    model = onnx.load(str(directory / "1" / "model.onnx"), load_external_data=False)
    return collections.Counter(node.op_type for node in model.graph.node)


def _signature(directory) -> list:
    model = onnx.load(str(directory / "1" / "model.onnx"), load_external_data=False)
    return [
        (value.name, [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim])
        for value in [*model.graph.input, *model.graph.output]
    ]


# --- @optimized


def test_optimized_is_a_fused_float32_model_named_as_a_variant(optimized):
    metadata = _metadata(optimized)
    assert metadata.model_name == f"{MINILM}@optimized"
    assert metadata.triton_name == f"{TRITON_NAME}---optimized"
    assert metadata.variant.name == "optimized"
    # Exported with eager attention, so the attention itself is fused.
    assert metadata.variant.fused_operators.get("Attention") == 6
    assert _ops(optimized)["Attention"] == 6
    # Measured before publishing moved the weights beside the graph (a few KB of framing apart).
    assert metadata.variant.onnx_bytes == pytest.approx(weights.size_bytes(optimized / "1" / "model.onnx"), rel=1e-3)
    assert metadata.parity.threshold == 0.9999
    assert metadata.parity.min_cosine >= 0.9999
    assert metadata.parity.mean_cosine >= metadata.parity.min_cosine
    assert parse((optimized / "config.pbtxt").read_text()).name == f"{TRITON_NAME}---optimized"


def test_optimized_keeps_the_inputs_output_and_dynamic_axes(optimized):
    assert _signature(optimized) == [
        (INPUT_IDS, ["batch", "sequence"]),
        (ATTENTION_MASK, ["batch", "sequence"]),
        (EMBEDDING, ["batch", 384]),
    ]


def test_optimized_matches_pytorch_on_unseen_sentences(optimized, minilm):
    cosines = cosine_rows(_embed(optimized, UNSEEN), minilm.encode(UNSEEN))
    assert cosines.min() >= 0.9999, cosines


# --- @int8


def test_int8_is_quantized_with_its_parity_recorded(quantized):
    metadata = _metadata(quantized)
    assert metadata.model_name == f"{MINILM}@int8"
    info = metadata.variant
    assert info.name == "int8"
    assert metadata.parity.threshold == 0.99
    assert 0.99 <= metadata.parity.min_cosine < 0.9999
    assert metadata.parity.min_cosine <= metadata.parity.mean_cosine < 1.0
    # Most MatMuls are int8; at most half stay float32, named in the metadata.
    total = info.int8_matmuls + len(info.float32_matmuls)
    assert total == 36
    assert info.int8_matmuls >= total / 2
    ops = _ops(quantized)
    assert ops["MatMulInteger"] == info.int8_matmuls
    assert ops["MatMul"] == len(info.float32_matmuls) + 12  # and attention's own two per layer
    assert info.onnx_bytes == pytest.approx(weights.size_bytes(quantized / "1" / "model.onnx"), rel=1e-3)
    assert _signature(quantized)[:2] == [(INPUT_IDS, ["batch", "sequence"]), (ATTENTION_MASK, ["batch", "sequence"])]


def test_int8_matches_pytorch_on_unseen_sentences(quantized, minilm):
    cosines = cosine_rows(_embed(quantized, UNSEEN), minilm.encode(UNSEEN))
    assert cosines.min() >= 0.99, cosines


def test_int8_is_smaller_than_float32(quantized, optimized):
    assert weights.size_bytes(quantized / "1" / "model.onnx") < 0.9 * weights.size_bytes(optimized / "1" / "model.onnx")


def test_no_scratch_files_are_published(quantized, optimized, repository):
    for directory in (quantized, optimized):
        files = sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())
        assert [f for f in files if not f.startswith("tokenizer/")] == [
            "1/batch_layout.py", "1/model.onnx", "1/model.onnx.data", "1/model.py", "1/torch_graphs.py", "config.pbtxt", "metadata.json",
        ]
    assert not (repository / STAGING_DIR).exists()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny dense model and its plain conversion: what a refusal needs, in seconds."""
    from sentence_transformers import SentenceTransformer

    root = tmp_path_factory.mktemp("tiny")
    model = tiny_models.dense_model(root / "model", seed=7)
    run = run_converter({"model_name": "org/tiny", "model_path": str(model), "triton_name": "tiny",
                         "repository": str(root / "repo")})
    assert run.returncode == 0, run.stderr[-3000:]
    return SentenceTransformer(str(model), device="cpu"), model, root / "repo" / "tiny"


def test_an_int8_variant_below_its_threshold_is_refused_and_nothing_is_published(tiny, tmp_path):
    # No int8 graph answers exactly what PyTorch does, even with half its MatMuls in float32.
    _, model, _ = tiny
    run = run_converter({"model_name": "org/tiny", "model_path": str(model), "triton_name": "tiny---int8",
                         "repository": str(tmp_path), "variant": "int8", "parity_threshold": 1.0})
    assert run.returncode == 3, run.stderr[-3000:]
    message = json.loads(run.stdout.strip().splitlines()[-1])["error"]
    assert "int8 parity check failed" in message, message
    kept, total = map(int, re.search(r"(\d+) of (\d+) MatMuls kept in float32", message).groups())
    assert total == 12 and kept == total // 2  # two layers of six; the most it may keep
    assert list(tmp_path.iterdir()) == []


def test_an_optimized_graph_below_the_threshold_is_refused(tiny, tmp_path):
    """In process, on the published plain graph: the fused graph is judged like the plain one."""
    library, _, published = tiny
    onnx_file = tmp_path / "model.onnx"
    onnx.save(onnx.load(str(published / "1" / "model.onnx")), str(onnx_file))  # its weights inside, as a conversion has it
    token_ids, reference = _parity_inputs(published, library)
    spec = ConversionSpec(**_spec(tmp_path, "optimized", parity_threshold=1.0))
    with pytest.raises(ParityError, match="parity check failed: min cosine .* < threshold 1.0"):
        variants.build(spec, library, tmp_path, onnx_file, token_ids, reference, lambda message: None)


def _parity_inputs(directory, library):
    sentences = parity.parity_sentences(64)
    tokenizer = TextTokenizer(directory / "tokenizer" / "tokenizer.json", 64, False)
    tokens = tokenizer.encode(sentences)
    token_ids = [row[: n].tolist() for row, n in zip(tokens.input_ids, tokens.token_counts)]
    return token_ids, library.encode(sentences)


# --- the contract


def test_variants_are_for_sentence_transformers_only():
    with pytest.raises(ValidationError, match="sentence-transformer models only"):
        ConversionSpec(library="open_clip", model_name="ViT-B-32", pretrained="x", triton_name="t", repository="r", variant="int8")
    with pytest.raises(ValidationError):
        ConversionSpec(model_name=MINILM, triton_name="t", repository="r", variant="fp16")


def test_metadata_written_before_variants_still_reads(tiny):
    stored = json.loads((tiny[2] / "metadata.json").read_text())
    stored.pop("variant", None)
    stored["parity"].pop("mean_cosine", None)
    metadata = ModelMetadata.model_validate(stored)
    assert metadata.variant is None and metadata.parity.mean_cosine is None


# --- int8 planning on a graph where the answer is known


def _two_matmul_graph(path, outlier: float) -> None:
    """ids -> table -> MatMul(first) -> MatMul(second) -> mean over tokens. ``first``'s
    output has one channel ``outlier`` times the others, so quantizing the input of
    ``second`` (one scale per tensor) wipes out its other channels; ``first`` is harmless."""
    rng = np.random.default_rng(0)
    table = rng.normal(size=(50, 16)).astype(np.float32)
    first = rng.normal(size=(16, 16)).astype(np.float32)
    first[:, 0] *= outlier
    second = rng.normal(size=(16, 8)).astype(np.float32)
    second[0, :] /= outlier  # the big channel contributes no more than the others
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["table", INPUT_IDS], ["tokens"]),
            helper.make_node("MatMul", ["tokens", "first"], ["hidden"], name="first"),
            helper.make_node("MatMul", ["hidden", "second"], ["projected"], name="second"),
            helper.make_node("Cast", [ATTENTION_MASK], ["mask"], to=TensorProto.FLOAT),
            helper.make_node("Unsqueeze", ["mask", "last"], ["mask_3d"]),
            helper.make_node("Mul", ["projected", "mask_3d"], ["masked"]),
            helper.make_node("ReduceSum", ["masked", "seq"], [EMBEDDING], keepdims=0),
        ],
        "two_matmuls",
        [
            helper.make_tensor_value_info(INPUT_IDS, TensorProto.INT64, ["batch", "sequence"]),
            helper.make_tensor_value_info(ATTENTION_MASK, TensorProto.INT64, ["batch", "sequence"]),
        ],
        [helper.make_tensor_value_info(EMBEDDING, TensorProto.FLOAT, ["batch", 8])],
        [
            numpy_helper.from_array(table, "table"),
            numpy_helper.from_array(first, "first"),
            numpy_helper.from_array(second, "second"),
            numpy_helper.from_array(np.array([2], dtype=np.int64), "last"),
            numpy_helper.from_array(np.array([1], dtype=np.int64), "seq"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


TOKEN_IDS = [[1, 5, 9, 13], [2, 4], [7, 8, 30, 31, 32, 49], [11]]


@pytest.fixture
def two_matmuls(tmp_path):
    path = tmp_path / "float32.onnx"
    _two_matmul_graph(path, outlier=500.0)
    reference = parity.onnx_runner(path)(parity.pad(TOKEN_IDS))
    return path, reference


def test_int8_per_channel_keeps_each_column_within_half_a_step():
    weights = np.random.default_rng(1).normal(size=(32, 4)).astype(np.float32) * np.array([1, 10, 100, 0])
    quantized = int8.int8_per_channel(weights.astype(np.float32))
    steps = np.abs(weights).max(axis=0) / 127
    assert np.all(np.abs(quantized - weights) <= steps / 2 + 1e-6)
    assert np.all(quantized[:, 3] == 0)


def test_the_simulation_is_float32_when_switched_off_and_int8_when_on(two_matmuls, tmp_path):
    path, reference = two_matmuls
    simulator = int8.Simulator(path, tmp_path)
    assert simulator.names == ["first", "second"]
    batch = parity.pad(TOKEN_IDS)
    np.testing.assert_allclose(simulator.runner(set())(batch), reference, rtol=1e-5, atol=1e-6)
    int8.quantize(path, tmp_path / "int8.onnx", [])
    real = parity.onnx_runner(tmp_path / "int8.onnx")(batch)
    simulated = simulator.runner({"first", "second"})(batch)
    assert cosine_rows(simulated, real).min() > 0.999
    assert cosine_rows(real, reference).min() < 0.99  # the quantization error is real


def test_the_choice_keeps_the_harmful_matmul_in_float32(two_matmuls, tmp_path):
    path, reference = two_matmuls
    steps = []
    choice = int8.choose_float32(int8.Simulator(path, tmp_path), TOKEN_IDS, reference, 0.999, 1, steps.append)
    assert choice.ranked == ["second", "first"]
    assert choice.keep_float32 == 1 and choice.simulated_min_cosine >= 0.999
    int8.quantize(path, tmp_path / "int8.onnx", choice.ranked[: choice.keep_float32])
    ops = collections.Counter(node.op_type for node in onnx.load(str(tmp_path / "int8.onnx")).graph.node)
    assert (ops["MatMulInteger"], ops["MatMul"]) == (1, 1)
    real = parity.onnx_runner(tmp_path / "int8.onnx")(parity.pad(TOKEN_IDS))
    assert cosine_rows(real, reference).min() >= 0.999
    assert steps[-1].startswith("simulated: min cosine")
