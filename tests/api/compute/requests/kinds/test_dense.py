"""A sentence-transformer's served forms beyond a graph in Triton: a static embedding model
computed by the gateway (no Triton model), and prompts kept apart from their texts where
the model's pooling leaves them out."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from embedgate.api.compute.requests.asks import Ask, Output
from embedgate.api.compute.requests.kinds import kind_of
from embedgate.api.compute.requests.prompts import PromptChoice
from embedgate.api.compute.requests.served import ServedModel
from embedgate.api.compute.requests.static import MeanVectors
from embedgate.contract.kinds.dense import DenseInfo, PromptExclusion
from embedgate.contract.preprocess.prompted import PromptedText, PromptMarkingTokenizer
from embedgate.contract.spec import STATIC_WEIGHTS_FILE, TOKENIZER_DIR, ParityResult, RouteInfo
from embedgate.contract.static import mean_vectors
from tests.api.conftest import fake_metadata

PARITY = ParityResult(passed=True, threshold=0.9999, min_cosine=1.0, sentences=1)


def _files(tmp_path: Path, minilm_path) -> Path:
    directory = tmp_path / "m"
    (directory / TOKENIZER_DIR).mkdir(parents=True)
    shutil.copy(Path(minilm_path) / "tokenizer.json", directory / TOKENIZER_DIR / "tokenizer.json")
    return directory


def test_a_static_model_is_computed_in_the_gateway_with_no_triton_model(tmp_path, minilm_path):
    directory = _files(tmp_path, minilm_path)
    vectors = np.random.default_rng(0).normal(size=(30522, 8)).astype(np.float32)
    np.save(directory / STATIC_WEIGHTS_FILE, vectors)
    route = RouteInfo(name="", tasks=["default", "query", "document"], version=None, max_seq_length=2**31 - 1,
                      add_special_tokens=False, normalized=True, parity=PARITY)
    kind = kind_of(fake_metadata("org/static", embedding_dim=8, routes=[route]))
    assert kind.parts("org--static") == ("org--static",) and kind.triton_parts("org--static") == ()
    (served,) = kind.routes(lambda part: directory, "org--static")
    assert isinstance(served.step, MeanVectors) and served.step.normalize
    # Mapped from the repository, not read into the gateway's memory.
    assert isinstance(served.step.vectors_of_tokens.base, np.memmap)
    batch = served.tokenizer.encode(["a man eats food", "hello"])
    assert batch.input_ids[0, 0] != 101, "a static model's texts have no special tokens"
    np.testing.assert_array_equal(
        served.step.vectors(batch.input_ids, batch.attention_mask),
        mean_vectors(vectors, batch.input_ids, batch.attention_mask, normalize=True),
    )


def test_a_graph_model_runs_in_triton():
    kind = kind_of(fake_metadata("org/dense"))
    assert kind.triton_parts("org--dense") == ("org--dense",)


def test_where_pooling_leaves_the_prompt_out_each_text_keeps_its_prompt_apart(tmp_path, minilm_path):
    directory = _files(tmp_path, minilm_path)
    record = DenseInfo(prompt_exclusion=PromptExclusion(special_ids=[0, 100, 101, 102, 103], parity=PARITY))
    metadata = fake_metadata(
        "org/instructor", prompts={"query": "query: ", "document": ""}, default_prompt_name="query", record=record
    )
    kind = kind_of(metadata)
    tokenizer = kind.tokenizer(lambda part: directory, "org--instructor")
    assert isinstance(tokenizer, PromptMarkingTokenizer) and 102 in tokenizer.special_ids
    model = ServedModel("org/instructor", "org--instructor", metadata, tokenizer)

    def run(choice: PromptChoice):
        (run,) = kind.plan(model, Ask(Output.EMBED, ["a", "b"], choice)).runs
        return run.inputs, run.prefix

    # The default prompt, one by name, one given: apart from each text, marked when tokenized.
    assert run(PromptChoice()) == ([PromptedText("query: ", "a"), PromptedText("query: ", "b")], "")
    assert run(PromptChoice(prompt="Represent: "))[0][1] == PromptedText("Represent: ", "b")
    # No prompt: plain texts, pooled whole.
    assert run(PromptChoice(prompt="")) == (["a", "b"], "")
    assert run(PromptChoice(prompt_name="document")) == (["a", "b"], "")


def test_a_model_pooling_every_token_prefixes_its_prompt(tmp_path, minilm_path):
    metadata = fake_metadata("org/e5", prompts={"query": "query: "})
    kind = kind_of(metadata)
    tokenizer = kind.tokenizer(lambda part: _files(tmp_path, minilm_path), "org--e5")
    assert not isinstance(tokenizer, PromptMarkingTokenizer)
    model = ServedModel("org/e5", "org--e5", metadata, tokenizer)
    (run,) = kind.plan(model, Ask(Output.EMBED, ["a"], PromptChoice(prompt_name="query"))).runs
    assert (run.inputs, run.prefix) == (["a"], "query: ")


def test_a_model_with_a_late_chunking_graph_is_two_triton_models():
    """Its graph and its late-chunking graph: both loaded, labelled apart in the metrics; a
    run of no model (EMBEDGATE_NOOP_INFERENCE) gives the late graph's shape."""
    from embedgate.contract.kinds.dense import LateChunking

    late = kind_of(fake_metadata("org/m", record=DenseInfo(late_chunking=LateChunking(parity=PARITY))))
    assert late.triton_parts("org--m") == ("org--m", "org--m---late")
    assert late.late_part("org/m", "org--m") == "org--m---late"
    assert late.part_labels("org--m") == {"org--m": {"part": "model"}, "org--m---late": {"part": "late_chunking"}}
    started = np.array([[0, 1, 1, 2, 2], [0, 1, 1, 1, 0]])
    assert late.noop_output({"input_ids": started, "chunk_started": started}).shape == (2, 2, 3)
    assert late.noop_output({"input_ids": started}).shape == (2, 3)
    plain = kind_of(fake_metadata("org/m"))
    assert plain.triton_parts("org--m") == ("org--m",) and plain.part_labels("org--m") == {}
