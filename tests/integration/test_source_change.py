"""A model loaded again under its name from a new source is converted again, never answered
from its old conversion: the real gateway and tritonserver, two tiny models that differ only
in their pooling (max, weighted mean), built offline.

Every answer compared with the library is one the model computed (fresh texts, and
``x-cached-inputs: 0``): the response cache answers repeats."""

from __future__ import annotations

import itertools
import shutil

import numpy as np
import pytest

from tests import tiny_models
from tests.helpers import cosine_rows

NAME = "stale/m"
LOAD = "/load_sentence_transformer_model"
_fresh = itertools.count()


def fresh_texts() -> list[str]:
    n = next(_fresh)
    return [f"the quick brown fox {n}", f"a man is eating food {n} times", f"hello world {n} search query document"]


def served(http, texts: list[str]) -> np.ndarray:
    response = http.post("/infer", json={"model_name": NAME, "text": texts})
    assert response.status_code == 200, response.text
    assert response.headers["x-cached-inputs"] == "0", "answered from the response cache"
    return np.asarray(response.json()["text_embeddings"])


def library(directory):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(directory), device="cpu")


def assert_serves(http, model, other=None) -> None:
    """``NAME`` answers ``model``'s vectors (and, with ``other``, not ``other``'s)."""
    texts = fresh_texts()
    vectors = served(http, texts)
    assert cosine_rows(vectors, model.encode(texts)).min() >= 0.9999
    if other is not None:
        assert cosine_rows(vectors, other.encode(texts)).min() < 0.99


def load(http, directory, **options):
    return http.post(LOAD, json={"model_name": NAME, "model_path": str(directory), **options})


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """Two models of the same weights, pooled otherwise: A (max) and B (weighted mean)."""
    root = tmp_path_factory.mktemp("sources")
    return tiny_models.dense_model(root / "a", pooling="max"), tiny_models.dense_model(root / "b", pooling="weightedmean")


@pytest.fixture
def http(gateway):
    with gateway.client() as client:
        yield client
        client.post("/delete_model", json={"model_name": NAME})  # other tests count the models


def test_a_model_loaded_again_from_another_source_is_converted_again(http, sources):
    a, b = sources
    model_a, model_b = library(a), library(b)

    first = load(http, a)
    assert first.status_code == 200 and first.json()["converted"], first.text
    assert_serves(http, model_a, model_b)
    assert http.post("/unload_model", json={"model_name": NAME}).status_code == 200

    again = load(http, b)
    assert again.status_code == 200 and again.json()["converted"], again.text
    assert_serves(http, model_b, model_a)
    listed = {m["model_name"]: m for m in http.get("/loaded_models").json()["models"]}[NAME]["made_from"]
    assert (listed["type"], listed["location"]) == ("directory", str(b.resolve()))
    assert listed["fingerprint"].startswith("sha256:")

    same = load(http, b)
    assert same.status_code == 200 and not same.json()["converted"], same.text

    refused = load(http, a, on_source_change="refuse")
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "source_changed" and str(a.resolve()) in error["message"] and str(b.resolve()) in error["message"]
    assert_serves(http, model_b, model_a)


def test_a_model_retrained_in_place_is_converted_again_while_it_serves(http, sources, tmp_path):
    _, b = sources
    model = tmp_path / "model"
    shutil.copytree(b, model)
    assert load(http, model).status_code == 200
    # From a copy: the library maps the weights file, and writing over it changes its tensors.
    before = library(shutil.copytree(model, tmp_path / "before"))
    assert_serves(http, before)

    # Trained again: the same shapes, other weights, written over the old file.
    retrained = tiny_models.dense_model(tmp_path / "retrained", pooling="weightedmean", seed=7)
    shutil.copyfile(retrained / "model.safetensors", model / "model.safetensors")
    answer = load(http, model)
    assert answer.status_code == 200 and answer.json()["converted"], answer.text
    assert answer.json()["status"] == "loaded"
    assert_serves(http, library(model), before)
