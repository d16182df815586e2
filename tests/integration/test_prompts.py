"""Prompts end to end: a tiny model with e5's prompts and a default one, served by the real
gateway and tritonserver, against ``SentenceTransformer.encode(texts, prompt_name=...)``;
Cohere's /v2/embed, whose ``input_type`` chooses the prompt, and whose ``truncate`` counts the
prompt's tokens."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from tests import prompt_models
from tests.helpers import cosine_rows

NAME = "org/tiny-prompts"
TEXTS = ["the quick brown fox", "hello world", "a man is eating food", "stocks fell at the bank"]
# A prompt named as one of Cohere's input types, which /v2/embed's "classification" takes.
CLASSIFICATION = "classify this text: "


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    directory = prompt_models.prompts_model(tmp_path_factory.mktemp("prompts") / "model")
    config_file = directory / "config_sentence_transformers.json"
    config = json.loads(config_file.read_text())
    config["prompts"]["classification"] = CLASSIFICATION
    config_file.write_text(json.dumps(config, indent=2))
    return directory


@pytest.fixture(scope="module")
def reference(model_dir):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(model_dir), device="cpu")


@pytest.fixture(scope="module")
def loaded(gateway, model_dir):
    with gateway.client(timeout=600) as http:
        response = http.post("/load_sentence_transformer_model", json={"model_name": NAME, "model_path": str(model_dir)})
        assert response.status_code == 200, response.text
        yield response.json()
        # Other tests count the loaded models.
        assert http.post("/delete_model", json={"model_name": NAME}).status_code == 200


def embeddings(response) -> np.ndarray:
    assert response.status_code == 200, response.text
    body = response.json()
    rows = body["text_embeddings"] if "text_embeddings" in body else [d["embedding"] for d in body["data"]]
    return np.asarray(rows, dtype=np.float64)


def test_infer_with_a_prompt_name_matches_encode_with_it(http, loaded, reference):
    for name in ("query", "passage"):
        response = http.post("/infer", json={"model_name": NAME, "text": TEXTS, "prompt_name": name})
        assert cosine_rows(embeddings(response), reference.encode(TEXTS, prompt_name=name)).min() >= 0.9999
        # The response cache keeps rows per prompt: the other prompt's rows are not these.
        assert response.headers["x-cached-inputs"] == "0"
    # The prompt matters: without one the vectors differ.
    response = http.post("/infer", json={"model_name": NAME, "text": TEXTS, "prompt": ""})
    plain = embeddings(response)
    assert response.headers["x-cached-inputs"] == "0"
    assert cosine_rows(plain, reference.encode(TEXTS, prompt="")).min() >= 0.9999
    assert cosine_rows(plain, reference.encode(TEXTS, prompt_name="passage")).max() < 0.999


def test_infer_without_a_prompt_gets_the_models_default_as_encode_does(http, loaded, reference):
    texts = ["the lazy dog", "search the bank", "an awesome movie", "hello model server"]
    served = embeddings(http.post("/infer", json={"model_name": NAME, "text": texts}))
    assert cosine_rows(served, reference.encode(texts)).min() >= 0.9999
    assert cosine_rows(served, reference.encode(texts, prompt_name="query")).min() >= 0.9999
    # Its prompt is the one named "query": the response cache has their rows under it.
    named = http.post("/infer", json={"model_name": NAME, "text": texts, "prompt_name": "query"})
    assert named.headers["x-cached-inputs"] == str(len(texts))
    np.testing.assert_array_equal(embeddings(named), served)


def test_embeddings_with_an_input_type_and_usage_counting_the_prompts_tokens(http, loaded, reference):
    for input_type, name in (("query", "query"), ("document", "passage"), ("passage", "passage")):
        body = {"model": NAME, "input": TEXTS, "input_type": input_type, "encoding_format": "float"}
        response = http.post("/v1/embeddings", json=body)
        served = embeddings(response)
        assert cosine_rows(served, reference.encode(TEXTS, prompt_name=name)).min() >= 0.9999
        prompt = prompt_models.PROMPTS[name]
        tokens = sum(len(reference.tokenizer(prompt + text)["input_ids"]) for text in TEXTS)
        assert response.json()["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}
        assert tokens > sum(len(reference.tokenizer(text)["input_ids"]) for text in TEXTS)


def test_an_unknown_prompt_is_a_400_listing_the_models_prompts(http, loaded):
    response = http.post("/infer", json={"model_name": NAME, "text": TEXTS, "prompt_name": "search"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "unknown_prompt"
    assert error["message"].endswith("its prompts: 'query', 'document', 'passage', 'classification'")


def test_the_listings_show_the_prompts(http, loaded):
    (listed,) = [m for m in http.get("/loaded_models").json()["models"] if m["model_name"] == NAME]
    assert listed["prompts"] == {
        "query": "search query: ", "document": "", "passage": "search document: ", "classification": CLASSIFICATION,
    }
    assert listed["default_prompt_name"] == "query"
    (model,) = [m for m in http.get("/v1/models").json()["data"] if m["id"] == NAME]
    assert model["prompts"] == listed["prompts"] and model["default_prompt_name"] == "query"


# --- Cohere's /v2/embed: input_type chooses the prompt (and the route) as the library's calls do


def cohere(http, texts, input_type, **body):
    return http.post("/v2/embed", json={"model": NAME, "texts": texts, "input_type": input_type, **body})


def test_cohere_input_types_take_the_models_prompts(http, loaded, reference):
    query, passage = prompt_models.PROMPTS["query"], prompt_models.PROMPTS["passage"]
    asked = {
        "search_query": (query, reference.encode_query),
        # Its document prompt: e5's "passage", the non-empty one (the library's own empty
        # "document" passed over, as /v1/embeddings' input_type passes it over), on the document route.
        "search_document": (passage, lambda texts: reference.encode_document(texts, prompt_name="passage")),
        "classification": (CLASSIFICATION, lambda texts: reference.encode(texts, prompt_name="classification")),
        # No prompt of that name: the model's default ("query"), as encode gives it; so do
        # texts under "image" (the type is the images', which take no prompt).
        "clustering": (query, reference.encode),
        "image": (query, reference.encode),
    }
    for input_type, (prompt, encode) in asked.items():
        texts = [f"{text} for {input_type.replace('_', ' ')}" for text in TEXTS]
        response = cohere(http, texts, input_type)
        assert response.status_code == 200, response.text
        assert response.headers["x-cached-inputs"] == "0", input_type
        served = np.asarray(response.json()["embeddings"]["float"])
        assert cosine_rows(served, encode(texts)).min() >= 0.9999, input_type
        np.testing.assert_allclose(np.linalg.norm(served, axis=1), 1, atol=1e-5)  # unit length, as Cohere's
        tokens = sum(len(reference.tokenizer(prompt + text)["input_ids"]) for text in texts)
        assert response.json()["meta"]["billed_units"] == {"input_tokens": tokens, "images": 0}, input_type


def test_cohere_truncate_none_refuses_a_text_past_the_max_length_its_prompt_counted(http, loaded, reference):
    prompt = prompt_models.PROMPTS["query"]
    limit = reference.max_seq_length

    def tokens(text: str) -> int:
        return len(reference.tokenizer(text)["input_ids"])

    # Word by word: the last text that fits behind the query prompt, and the next, which
    # fits alone but not behind it.
    words = "the lazy dog eats food at the bank".split()
    fits = edge = ""
    for word in itertools.cycle(words):
        fits, edge = edge, f"{edge} {word}".strip()
        if tokens(prompt + edge) > limit:
            break
    assert tokens(prompt + fits) <= limit and tokens(edge) <= limit < tokens(prompt + edge)
    long = "stocks fell at the bank " * 40
    for texts, cut in (([fits, long], [1]), ([edge], [0]), ([long, fits, long], [0, 2])):
        response = cohere(http, texts, "search_query", truncate="NONE")
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == "input_too_long", error
        assert f"inputs {cut} are longer than model '{NAME}''s max length ({limit} tokens)" in error["message"]
    answered = cohere(http, [fits], "search_query", truncate="NONE")
    assert answered.status_code == 200, answered.text
    assert answered.headers["x-truncated-inputs"] == "0"
    assert cosine_rows(answered.json()["embeddings"]["float"], reference.encode_query([fits])).min() >= 0.9999
    # END, the default: cut at the model's max length, as the library cuts it.
    own = [f"cut at the end {fits}", f"cut at the end {long}"]
    for body in ({}, {"truncate": "END"}):
        response = cohere(http, own, "search_query", **body)
        assert response.status_code == 200, response.text
        assert response.headers["x-truncated-inputs"] == "2"
        assert cosine_rows(response.json()["embeddings"]["float"], reference.encode_query(own)).min() >= 0.9999
        assert response.json()["meta"]["billed_units"]["input_tokens"] == 2 * limit


# --- a model whose Pooling leaves the prompt's tokens out (include_prompt=False, INSTRUCTOR-style)

LEFT_OUT = "org/tiny-prompts-left-out"


@pytest.fixture(scope="module")
def left_out_reference(tmp_path_factory):
    from sentence_transformers import SentenceTransformer

    directory = prompt_models.prompts_left_out_model(tmp_path_factory.mktemp("left-out") / "model")
    return SentenceTransformer(str(directory), device="cpu"), directory


@pytest.fixture(scope="module")
def left_out(gateway, left_out_reference):
    _, directory = left_out_reference
    with gateway.client(timeout=600) as http:
        body = {"model_name": LEFT_OUT, "model_path": str(directory)}
        response = http.post("/load_sentence_transformer_model", json=body)
        assert response.status_code == 200, response.text
        yield response.json()
        assert http.post("/delete_model", json={"model_name": LEFT_OUT}).status_code == 200


def uncached(response) -> np.ndarray:
    assert response.headers["x-cached-inputs"] == "0"
    return embeddings(response)


def test_prompts_left_out_of_pooling_match_encode_by_name_text_default_and_none(http, left_out, left_out_reference):
    reference, _ = left_out_reference
    texts = ["a quick model server", "the lazy dog is eating", "stocks fell at the bank", "hello search engine"]
    asked = [
        ({"prompt_name": "passage"}, {"prompt_name": "passage"}),
        ({"prompt": "Represent the document: "}, {"prompt": "Represent the document: "}),
        ({}, {}),  # the default prompt, "query"
        ({"prompt": ""}, {"prompt": ""}),  # none at all
    ]
    for number, (request, encode) in enumerate(asked):
        own = [f"{text} {number}" for text in texts]
        served = uncached(http.post("/infer", json={"model_name": LEFT_OUT, "text": own, **request}))
        assert cosine_rows(served, reference.encode(own, **encode)).min() >= 0.9999, request
    # The prompt's tokens are left out, not pooled: encode pooling them gives other vectors.
    pooled = reference.encode(texts, prompt="search query: ", convert_to_numpy=True)
    reference[1].include_prompt = True
    try:
        assert cosine_rows(pooled, reference.encode(texts, prompt="search query: ")).max() < 0.999
    finally:
        reference[1].include_prompt = False


def test_prompts_left_out_on_v1_embeddings_and_the_listing(http, left_out, left_out_reference):
    reference, _ = left_out_reference
    texts = ["embedding servers batch requests", "a man eats food at the bank"]
    body = {"model": LEFT_OUT, "input": texts, "input_type": "document", "encoding_format": "float"}
    served = uncached(http.post("/v1/embeddings", json=body))
    assert cosine_rows(served, reference.encode(texts, prompt_name="passage")).min() >= 0.9999
    (listed,) = [m for m in http.get("/loaded_models").json()["models"] if m["model_name"] == LEFT_OUT]
    assert listed["prompts_refused"] is None and listed["default_prompt_name"] == "query"


async def test_requests_of_different_prompts_at_once_each_pool_their_own(gateway, left_out, left_out_reference):
    """Sent together, they may share Triton calls (tests/api/compute/test_service_prompt_marks.py
    holds that they do, each row with its own prompt's marks)."""
    import asyncio

    import httpx

    reference, _ = left_out_reference
    prompts = ["search query: ", "search document: ", "Represent it: ", ""]
    asked = [(prompts[n % len(prompts)], f"the quick text number {n} of the bank") for n in range(24)]
    async with httpx.AsyncClient(base_url=gateway.url, timeout=120) as client:
        answers = await asyncio.gather(*[
            client.post("/infer", json={"model_name": LEFT_OUT, "text": [text], "prompt": prompt}) for prompt, text in asked
        ])
    served = np.concatenate([uncached(answer) for answer in answers])
    expected = np.concatenate([reference.encode([text], prompt=prompt) for prompt, text in asked])
    assert cosine_rows(served, expected).min() >= 0.9999
