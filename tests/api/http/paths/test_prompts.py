"""Prompts on /infer (prompt_name, prompt) and /v1/embeddings (input_type), with fake parts:
what the routes accept and refuse, and which prompt reaches the compute path.

FakeEmbeddings chooses and prepends the prompt as the real service does, records the
prompted texts, and counts one token per character."""

from __future__ import annotations

import pytest

from tests.api.http.paths.test_inference import assert_error
from tests.api.http.paths.test_openai import assert_openai_error

MODEL = "org/loaded"
E5 = {"query": "query: ", "passage": "passage: ", "document": ""}


@pytest.fixture
def prompted(gateway):
    gateway.registry.changes[MODEL] = {"prompts": E5, "default_prompt_name": "query"}
    return gateway


def infer(client, **fields):
    return client.post("/infer", json={"model_name": MODEL, "text": ["ab", "cde"], **fields})


def sent(gateway) -> list[str]:
    (call,) = gateway.embeddings.calls[-1:]
    return call[1]


def test_infer_with_a_prompt_name_the_default_or_a_prompt_of_its_own(client, prompted):
    for fields, prompt in [
        ({"prompt_name": "passage"}, "passage: "),
        ({}, "query: "),  # the model's default_prompt_name
        ({"prompt": "Represent this: "}, "Represent this: "),
        ({"prompt": ""}, ""),  # no prompt, not even the default
        ({"prompt_name": "document"}, ""),
        ({"prompt_name": None, "prompt": None}, "query: "),
    ]:
        response = infer(client, **fields)
        assert response.status_code == 200, response.text
        assert sent(prompted) == [prompt + "ab", prompt + "cde"], fields


def test_infer_refuses_an_unknown_prompt_name_listing_the_models_prompts(client, prompted):
    message = assert_error(infer(client, prompt_name="search"), 400, "unknown_prompt")
    assert message == "model 'org/loaded' has no prompt named 'search'; its prompts: 'query', 'passage', 'document'"


def test_infer_refuses_both_a_prompt_name_and_a_prompt(client, prompted):
    message = assert_error(infer(client, prompt_name="query", prompt="q: "), 400, "bad_request")
    assert message == "give prompt_name or prompt, not both"
    assert prompted.embeddings.calls == []


@pytest.mark.parametrize(
    "fields",
    [{"prompt_name": ""}, {"prompt_name": "has space"}, {"prompt_name": "x" * 101}, {"prompt": "x" * 2049},
     {"prompt_name": 1}, {"prompt": ["q: "]}],
)  # fmt: skip
def test_infer_refuses_what_the_schema_forbids(client, prompted, fields):
    assert_error(infer(client, **fields), 422, "invalid_request")


def test_infer_refuses_prompts_a_model_cannot_take(client, gateway):
    why = "its Pooling module leaves the prompt's tokens out of pooling (include_prompt=False)"
    gateway.registry.changes[MODEL] = {"prompts": E5, "prompts_refused": why}
    assert why in assert_error(infer(client, prompt_name="query"), 400, "prompts_unsupported")
    assert infer(client).status_code == 200 and sent(gateway) == ["ab", "cde"]


def test_models_converted_before_prompts_were_recorded_take_no_prompt_but_still_serve(client, gateway):
    message = assert_error(infer(client, prompt_name="query"), 400, "prompts_unsupported")
    assert "delete it and load it again" in message
    assert infer(client).status_code == 200 and sent(gateway) == ["ab", "cde"]


@pytest.mark.parametrize(
    "input_type, prompt", [("query", "query: "), ("document", "passage: "), ("passage", "passage: "), (None, "query: ")]
)
def test_embeddings_with_an_input_type_and_usage_counting_the_prompt(client, prompted, input_type, prompt):
    body = {"model": MODEL, "input": ["ab", "cde"], "input_type": input_type}
    response = client.post("/v1/embeddings", json=body)
    assert response.status_code == 200, response.text
    assert sent(prompted) == [prompt + "ab", prompt + "cde"]
    tokens = 2 * len(prompt) + 5  # one token per character in the fake
    assert response.json()["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}


def test_embeddings_refuse_an_input_type_the_model_has_no_prompt_for(client, gateway):
    gateway.registry.changes[MODEL] = {"prompts": {"classification": "c: "}}
    response = client.post("/v1/embeddings", json={"model": MODEL, "input": "ab", "input_type": "query"})
    message = assert_openai_error(response, 400, "unknown_prompt", "input_type")
    assert message.endswith("its prompts: 'classification'")


def test_embeddings_take_an_input_type_as_no_prompt_for_a_model_without_prompts(client, gateway):
    gateway.registry.changes[MODEL] = {"prompts": {}}
    response = client.post("/v1/embeddings", json={"model": MODEL, "input": "ab", "input_type": "passage"})
    assert response.status_code == 200, response.text
    assert sent(gateway) == ["ab"]


@pytest.mark.parametrize("input_type", ["search_query", "", 1])
def test_embeddings_refuse_other_input_types(client, prompted, input_type):
    response = client.post("/v1/embeddings", json={"model": MODEL, "input": "ab", "input_type": input_type})
    assert_openai_error(response, 400, "invalid_request", "input_type")


def test_the_listings_and_v1_models_show_the_prompts(client, prompted):
    (listed,) = client.get("/loaded_models").json()["models"]
    assert (listed["prompts"], listed["default_prompt_name"], listed["prompts_refused"]) == (E5, "query", None)
    (model,) = client.get("/v1/models").json()["data"]
    assert (model["prompts"], model["default_prompt_name"]) == (E5, "query")
    one = client.get(f"/v1/models/{MODEL}").json()
    assert (one["prompts"], one["default_prompt_name"]) == (E5, "query")


def test_the_document_declares_the_prompt_fields_with_their_constraints(client):
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    infer_fields = schemas["InferRequest"]["properties"]
    name = next(branch for branch in infer_fields["prompt_name"]["anyOf"] if branch.get("type") == "string")
    assert (name["minLength"], name["maxLength"], name["pattern"]) == (1, 100, r"^[A-Za-z0-9_.:-]+$")
    text = next(branch for branch in infer_fields["prompt"]["anyOf"] if branch.get("type") == "string")
    assert text["maxLength"] == 2048
    assert {"not": {"required": ["prompt_name", "prompt"], "properties": {
        "prompt_name": {"type": "string"}, "prompt": {"type": "string"}}}} in schemas["InferRequest"]["allOf"]  # fmt: skip
    input_type = schemas["EmbeddingsRequest"]["properties"]["input_type"]
    assert {"enum": ["query", "document", "passage"], "type": "string"} in input_type["anyOf"]
    assert {"prompts", "default_prompt_name", "prompts_refused"} <= set(schemas["ModelInfo"]["properties"])
    assert {"prompts", "default_prompt_name"} <= set(schemas["Model"]["properties"])
