"""A model's prompts reach metadata.json; a pooling that leaves the prompt out refuses them."""

from __future__ import annotations

import pytest

from embedgate.contract.errors import ConversionError
from embedgate.contract.spec import ModelMetadata
from embedgate.converters.library.prompts import read_prompts
from tests import prompt_models, tiny_models
from tests.api.conftest import fake_metadata
from tests.converters.conftest import run_converter


def test_the_metadata_carries_the_prompts_and_the_default(tmp_path):
    model = prompt_models.prompts_model(tmp_path / "model")
    repository = tmp_path / "repository"
    spec = {"model_name": "org/tiny-prompts", "model_path": str(model), "triton_name": "org--tiny-prompts",
            "repository": str(repository)}  # fmt: skip
    run = run_converter(spec)
    # The default prompt does not reach the parity check: the graph embeds texts as given.
    assert run.returncode == 0, run.stderr[-3000:]
    metadata = ModelMetadata.model_validate_json((repository / "org--tiny-prompts" / "metadata.json").read_text())
    # As sentence-transformers holds them: 6.x adds an empty "document" prompt.
    assert metadata.prompts == {**prompt_models.PROMPTS, "document": ""}
    assert metadata.default_prompt_name == prompt_models.DEFAULT_PROMPT_NAME
    assert metadata.prompts_refused is None
    assert metadata.parity.passed


def _model(tmp_path, *, include_prompt: bool, **prompts):
    from sentence_transformers import SentenceTransformer, models

    bert = tiny_models.save_bert(tmp_path / "bert")
    transformer = models.Transformer(str(bert), max_seq_length=32)
    pooling = models.Pooling(transformer.get_embedding_dimension(), include_prompt=include_prompt)
    return SentenceTransformer(modules=[transformer, pooling], device="cpu", **prompts)


def test_a_pooling_that_leaves_the_prompt_out_refuses_prompts_with_the_reason(tmp_path):
    read = read_prompts(_model(tmp_path, include_prompt=False, prompts={"query": "query: "}))
    assert read.prompts["query"] == "query: "
    assert "include_prompt=False" in read.refused


def test_and_refuses_the_conversion_where_its_default_prompt_would_apply_to_every_text(tmp_path):
    model = _model(tmp_path, include_prompt=False, prompts={"query": "query: "}, default_prompt_name="query")
    with pytest.raises(ConversionError, match="default prompt 'query'.*include_prompt=False"):
        read_prompts(model)


def test_an_ordinary_pooling_takes_prompts(tmp_path):
    read = read_prompts(_model(tmp_path, include_prompt=True, prompts={"query": "query: "}, default_prompt_name="query"))
    assert (read.prompts["query"], read.default_prompt_name, read.refused) == ("query: ", "query", None)


def test_older_metadata_loads_with_prompts_unknown_and_clip_models_have_none():
    from tests.api.models.test_on_disk import clip_metadata

    unrecorded = {"prompts", "default_prompt_name", "prompts_refused"}
    old = fake_metadata("org/old").model_dump(exclude=unrecorded)
    assert ModelMetadata.model_validate(old).prompts is None
    old_clip = clip_metadata("ViT-B-32", "tag").model_dump(exclude=unrecorded)
    assert ModelMetadata.model_validate(old_clip).prompts == {}


def test_a_kind_that_pools_around_the_prompt_serves_them_and_their_default(tmp_path):
    model = _model(tmp_path, include_prompt=False, prompts={"query": "query: "}, default_prompt_name="query")
    read = read_prompts(model, exclusion_refusal=None)
    assert (read.refused, read.excluded, read.default_prompt_name) == (None, True, "query")
    assert read_prompts(_model(tmp_path, include_prompt=True), exclusion_refusal=None).excluded is False
