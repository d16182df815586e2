"""A model loaded again under its name from a new source is converted again, never answered
from its old conversion: the real gateway and tritonserver, two tiny models that differ only
in their pooling (max, weighted mean), built offline. While it is converted again the old
copy answers every request, never refused, until the new one is published; the response
cache's rows of the old copy never answer for the new one.

Every answer compared with the library is one the model computed (fresh texts, and
``x-cached-inputs: 0``) unless it says otherwise: the response cache answers repeats."""

from __future__ import annotations

import itertools
import shutil
import time
from concurrent.futures import ThreadPoolExecutor

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


def assert_cached_rows_not_served(http, texts: list[str], model, other) -> None:
    """``texts``, answered (and kept in the response cache) by an earlier copy, ``other``, are
    answered with ``model``'s vectors: the old rows do not answer for it."""
    response = http.post("/infer", json={"model_name": NAME, "text": texts})
    assert response.status_code == 200, response.text
    vectors = np.asarray(response.json()["text_embeddings"])
    assert cosine_rows(vectors, model.encode(texts)).min() >= 0.9999
    assert cosine_rows(vectors, other.encode(texts)).max() < 0.99


def test_a_model_loaded_again_from_another_source_is_converted_again(http, sources):
    a, b = sources
    model_a, model_b = library(a), library(b)

    first = load(http, a)
    assert first.status_code == 200 and first.json()["converted"], first.text
    asked_of_a = fresh_texts()
    assert cosine_rows(served(http, asked_of_a), model_a.encode(asked_of_a)).min() >= 0.9999
    assert_serves(http, model_a, model_b)
    assert http.post("/unload_model", json={"model_name": NAME}).status_code == 200

    again = load(http, b)
    assert again.status_code == 200 and again.json()["converted"], again.text
    assert_serves(http, model_b, model_a)
    assert_cached_rows_not_served(http, asked_of_a, model_b, model_a)
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


def test_a_model_retrained_in_place_is_converted_again_while_it_serves(gateway, http, sources, tmp_path):
    _, b = sources
    model = tmp_path / "model"
    shutil.copytree(b, model)
    assert load(http, model).status_code == 200
    # From a copy: the library maps the weights file, and writing over it changes its tensors.
    before = library(shutil.copytree(model, tmp_path / "before"))
    assert_serves(http, before)
    asked_before = fresh_texts()  # kept in the response cache, the old copy's rows
    assert cosine_rows(served(http, asked_before), before.encode(asked_before)).min() >= 0.9999

    # Trained again: the same shapes, other weights, written over the old file.
    retrained = tiny_models.dense_model(tmp_path / "retrained", pooling="weightedmean", seed=7)
    shutil.copyfile(retrained / "model.safetensors", model / "model.safetensors")
    after = library(retrained)
    # Loaded again while a client asks on: until the new copy is published every request is
    # answered 200 by the old one (fresh texts, and the old copy's cached rows), none refused.
    during: list[tuple[list[str], object, float]] = []
    with gateway.client() as loader, ThreadPoolExecutor(1) as pool:
        loading = pool.submit(load, loader, model)
        while not loading.done():
            texts = fresh_texts() if len(during) % 2 else asked_before
            response = http.post("/infer", json={"model_name": NAME, "text": texts})
            during.append((texts, response, time.monotonic()))
            time.sleep(0.1)  # a client asking on, leaving the conversion the CPU
        answer = loading.result()
    assert answer.status_code == 200 and answer.json()["converted"], answer.text
    assert answer.json()["status"] == "loaded"
    refused = [(r.status_code, r.text[:200]) for _, r, _ in during if r.status_code != 200]
    assert not refused, refused
    # Each answer is the old copy's or, at the end only, the new one's (published before the
    # load answers): never the old after the new.
    asked = [text for texts, _, _ in during for text in texts]
    vectors = np.concatenate([response.json()["text_embeddings"] for _, response, _ in during])
    old_rows, new_rows = (cosine_rows(vectors, m.encode(asked)) >= 0.9999 for m in (before, after))
    whose, start = [], 0
    for texts, _, _ in during:
        rows, start = slice(start, start + len(texts)), start + len(texts)
        old, new = old_rows[rows].all(), new_rows[rows].all()
        assert old or new, texts
        whose.append("old" if old else "new")
    assert whose == sorted(whose, key=("old", "new").index), whose
    computed_by_old = [r for (_, r, _), w in zip(during, whose) if w == "old" and r.headers["x-cached-inputs"] == "0"]
    assert len(computed_by_old) >= 2, f"the old copy computed {len(computed_by_old)} answers during the reconversion"
    print(f"\nduring the reconversion: {whose.count('old')} answered by the old copy "
          f"({len(computed_by_old)} computed), {whose.count('new')} by the new one, none refused")
    assert_serves(http, library(model), before)
    assert_cached_rows_not_served(http, asked_before, after, before)
