"""Cohere's v2 API with fake parts: /v2/embed's texts, images and inputs in their order, its
embedding types, what it refuses and why; /v2/rerank's shape."""

from __future__ import annotations

import numpy as np
import pytest

from embedgate.contract.spec import Calibration
from tests.api.compute.requests.kinds.test_multimodal import RECORD

from .test_inference import assert_error
from .test_tei import RERANKER

MULTIMODAL = {"kind": "multimodal", "record": RECORD, "normalized": True, "prompts": {"query": "", "document": ""}}
CALIBRATED = Calibration(texts=2, ranges=[[-1.0] * 3, [1.0] * 3], normalized_ranges=[[0.0] * 3, [16.0] * 3])


@pytest.fixture
def multimodal(gateway):
    gateway.registry.loaded_names.add("org/mm")
    gateway.registry.changes["org/mm"] = MULTIMODAL
    return gateway


def embed(client, **body):
    return client.post("/v2/embed", json={"model": "org/mm", "input_type": "search_document", **body})


def test_texts_answer_in_cohere_shape(client, multimodal):
    response = embed(client, texts=["a", "bb"])
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"id", "response_type", "embeddings", "texts", "meta"}
    assert body["response_type"] == "embeddings_by_type" and body["texts"] == ["a", "bb"]
    assert body["embeddings"]["float"] == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert body["meta"] == {"api_version": {"version": "2"}, "billed_units": {"input_tokens": 3, "images": 0}}
    assert response.headers["x-cached-inputs"] == "0"


def test_inputs_of_texts_and_images_come_back_in_their_order(client, multimodal):
    inputs = [
        {"content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
        {"content": [{"type": "text", "text": "a text"}]},
        {"content": [{"type": "image_url", "image_url": {"url": "https://example.com/x.png"}}]},
    ]
    response = embed(client, inputs=inputs, input_type="image")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["embeddings"]["float"] == [[1.0, 1.0, 1.0], [0.0, 1.0, 2.0], [1.0, 1.0, 1.0]]
    assert body["texts"] == ["a text"] and body["meta"]["billed_units"]["images"] == 2
    assert multimodal.embeddings.image_calls == [("org/mm", ["data:image/png;base64,AAAA", "https://example.com/x.png"], True)]


def test_images_alone(client, multimodal):
    response = embed(client, images=["data:image/png;base64,AAAA"], input_type="image",
                     embedding_types=["float", "ubinary", "base64"])
    assert response.status_code == 200, response.text
    embeddings = response.json()["embeddings"]
    assert embeddings["float"] == [[1.0, 1.0, 1.0]] and embeddings["ubinary"] == [[224]]
    assert np.frombuffer(__import__("base64").b64decode(embeddings["base64"][0]), "<f4").tolist() == [1.0, 1.0, 1.0]


def test_each_embedding_type_from_one_run(client, multimodal):
    multimodal.registry.changes["org/mm"] = {**MULTIMODAL, "calibration": CALIBRATED}
    response = embed(client, texts=["a"], embedding_types=["int8", "uint8", "binary", "float", "int8"])
    assert response.status_code == 200, response.text
    embeddings = response.json()["embeddings"]
    assert list(embeddings) == ["int8", "uint8", "binary", "float"]
    assert len(multimodal.embeddings.calls) == 1


def test_search_query_takes_the_query_prompt_and_output_dimension_cuts(client, multimodal):
    multimodal.registry.changes["org/mm"] = {**MULTIMODAL, "prompts": {"query": "q: ", "document": ""}}
    multimodal.registry.changes["org/mm"]["embedding_dim"] = 3
    response = embed(client, texts=["a"], input_type="search_query", output_dimension=2)
    assert response.status_code == 200, response.text
    assert multimodal.embeddings.calls[0][1] == ["q: a"]
    assert len(response.json()["embeddings"]["float"][0]) == 2


@pytest.mark.parametrize(
    "body, code, words",
    [
        ({"texts": ["a"], "images": ["data:image/png;base64,AAAA"]}, "bad_request", "one of texts, images or inputs"),
        ({}, "bad_request", "one of texts, images or inputs"),
        ({"inputs": [{"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}, "bad_request",
         "inputs[0] has 2 parts"),
        ({"texts": ["a"], "truncate": "START"}, "bad_request", "truncate START is not served"),
        ({"texts": ["a"], "max_tokens": 3}, "bad_request", "max_tokens below model 'org/mm''s max length (16)"),
        ({"images": ["data:image/png;base64,AAAA"], "embedding_types": ["int8"]}, "bad_request",
         "image embeddings have no ranges"),
        ({"texts": ["a"], "embedding_types": ["uint8"]}, "bad_request", "has no ranges calibrated"),
    ],
)
def test_what_cannot_be_served_as_asked_is_refused(client, multimodal, body, code, words):
    assert words in assert_error(embed(client, **body), 400, code)
    assert multimodal.embeddings.calls == [] and multimodal.embeddings.image_calls == []


def test_a_whole_float_priority_is_an_integer(client, multimodal):
    assert embed(client, texts=["a"], priority=7.0).status_code == 200


def test_images_for_a_model_without_them_are_refused_saying_where_to_go(client):
    response = client.post("/v2/embed", json={"model": "org/loaded", "input_type": "image",
                                              "images": ["data:image/png;base64,AAAA"]})
    assert "gives no embeddings of images" in assert_error(response, 400, "wrong_model_kind")


@pytest.mark.parametrize("body", [{"texts": ["a"], "embedding_types": ["float16"]}, {"texts": ["a"], "extra": 1},
                                  {"texts": "a"}, {"texts": [], "images": ["data:image/png;base64,AAAA"]},
                                  {"texts": ["a"], "priority": 7.5}, {"texts": ["a"], "priority": -1}])
def test_bodies_outside_cohere_shape_are_422(client, multimodal, body):
    assert_error(embed(client, **body), 422, "invalid_request")


def test_rerank_answers_in_cohere_shape(client, gateway):
    gateway.registry.changes["org/loaded"] = RERANKER
    response = client.post("/v2/rerank", json={"model": "org/loaded", "query": "q", "documents": ["a", "ccc", "bb"],
                                               "top_n": 2})
    assert response.status_code == 200, response.text
    body = response.json()
    assert [(result["index"], result["relevance_score"]) for result in body["results"]] == [(1, 3.0), (2, 2.0)]
    assert body["meta"]["billed_units"] == {"search_units": 1} and body["id"]
    short = client.post("/v2/rerank", json={"model": "org/loaded", "query": "q", "documents": ["a"],
                                            "max_tokens_per_doc": 4})
    assert "max_tokens_per_doc below" in assert_error(short, 400, "bad_request")
