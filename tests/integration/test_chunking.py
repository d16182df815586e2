"""Chunked embedding through the real gateway and tritonserver: long documents (several of
MiniLM's windows, in Latin, CJK and emoji) cut into chunks of its own tokens, each chunk's
vector against ``SentenceTransformer.encode`` of the chunk's text, the spans against the
library's tokenizer; through ``/infer``, OpenAI's client (``extra_body``) and a bulk job's
lines; the bounds refused saying which."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import numpy as np
import openai
import pytest

from tests.helpers import cosine_rows, page_curl, page_python

from .conftest import MINILM, run_batch

SENTENCES = [
    "Retrieval over long documents cuts them into chunks before embedding them.",
    "Each chunk is embedded on its own, and its place in the document is kept beside its vector!",
    "東京は日本の首都です。大阪も大きな都市で、食べ物が有名です。",
    "Emoji carry meaning too 🎉🚀✨ — and so does punctuation, doesn't it?",
]


def assert_error(response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["status"], error["code"]) == (status, code), error
    return error["message"]


def documents() -> list[str]:
    """Texts the server has not seen, each several windows long (every sentence marked with
    a fresh tag, so that no chunk's text repeats another's), and a short one."""
    tag = uuid.uuid4().hex[:6]
    english = " ".join(f"{sentence} ({tag} {i})" for i in range(12) for sentence in SENTENCES)
    japanese = "".join(f"長い文書を分割します{tag}{i}。" for i in range(60)) + " 🎉" * 20 + f" {tag}"
    return [english, japanese, f"short {tag}"]


def assert_chunks_are_the_librarys(minilm, texts, chunks_of, vectors_of, max_tokens: int, overlap: int) -> None:
    """Every chunk: its text's vector as encode gives it, at most ``max_tokens`` of the
    model's tokens, in order, together holding every token of its text."""
    tokenizer = minilm.tokenizer
    for text, chunks, vectors in zip(texts, chunks_of, vectors_of):
        parts = [text[chunk["start"] : chunk["end"]] for chunk in chunks]
        assert cosine_rows(vectors, minilm.encode(parts)).min() >= 0.9999
        counts = [len(tokenizer(part, add_special_tokens=False)["input_ids"]) for part in parts]
        assert [chunk["tokens"] for chunk in chunks] == counts
        assert max(counts) <= max_tokens
        offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        spans = [(start, stop) for start, stop in offsets if text[start:stop].strip()]
        assert all(any(c["start"] <= start and stop <= c["end"] for c in chunks) for start, stop in spans)
        assert all(b["start"] > a["start"] and b["end"] > a["end"] for a, b in zip(chunks, chunks[1:]))
        if len(chunks) > 1 and overlap:
            assert all(b["start"] < a["end"] for a, b in zip(chunks, chunks[1:]))  # they overlap


@pytest.mark.parametrize("boundary", ["token", "whitespace", "sentence"])
def test_infer_chunks_are_encode_of_their_text(http, minilm_loaded, minilm, boundary):
    texts = documents()
    chunking = {"max_tokens": 48, "overlap": 8, "boundary": boundary}
    response = http.post("/infer", json={"model_name": MINILM, "text": texts, "chunking": chunking})
    assert response.status_code == 200, response.text
    body = response.json()
    assert "text_embeddings" not in body or body["text_embeddings"] is None
    chunks_of = body["text_chunks"]
    assert [len(chunks) > 3 for chunks in chunks_of] == [True, True, False]
    vectors_of = [np.array([chunk["embedding"] for chunk in chunks]) for chunks in chunks_of]
    assert_chunks_are_the_librarys(minilm, texts, chunks_of, vectors_of, 48, 8)
    assert int(response.headers["x-cached-inputs"]) == 0
    if boundary == "sentence":
        # The English paragraph's chunks end where its sentences do.
        first = texts[0]
        assert sum(first[c["end"] - 1] in ".!?。" for c in chunks_of[0]) >= len(chunks_of[0]) // 2


def test_openai_client_sends_chunking_in_extra_body_and_reads_each_chunk(gateway, minilm_loaded, minilm):
    texts = documents()[:2]
    with openai.OpenAI(api_key="unused", base_url=f"{gateway.url}/v1", max_retries=0, timeout=60) as client:
        result = client.embeddings.create(
            model=MINILM, input=texts, extra_body={"chunking": {"max_tokens": 100, "overlap": 20}}
        )
    data = [item.model_dump() for item in result.data]
    assert [item["index"] for item in data] == list(range(len(data)))
    chunks_of = [[item for item in data if item["input_index"] == index] for index in range(len(texts))]
    vectors_of = [np.asarray([item["embedding"] for item in chunks], dtype=np.float32) for chunks in chunks_of]
    assert_chunks_are_the_librarys(minilm, texts, chunks_of, vectors_of, 100, 20)
    for vectors in vectors_of:
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # Usage: the tokens the model saw, each chunk with its special tokens.
    assert result.usage.prompt_tokens == sum(item["tokens"] + 2 for item in data)


def test_a_bulk_line_is_chunked_as_the_route_chunks_it(gateway, http, minilm_loaded, minilm):
    """The line's chunks computed in the bulk lane (texts the server has not seen), against
    the library; its spans as the online route cuts the same body (the cutting is redone
    online: only vectors would come from the response cache)."""
    texts = documents()[:1]
    body = {"model": MINILM, "input": texts, "chunking": {"max_tokens": 64, "overlap": 16, "boundary": "whitespace"}}
    line = json.dumps({"custom_id": "c0", "method": "POST", "url": "/v1/embeddings", "body": body})
    batch, output, errors = run_batch(gateway, [line], "/v1/embeddings")
    assert batch.status == "completed" and not errors
    data = output["c0"]["response"]["body"]["data"]
    parts = [texts[0][d["start"] : d["end"]] for d in data]
    assert cosine_rows([d["embedding"] for d in data], minilm.encode(parts)).min() >= 0.9999
    online = http.post("/v1/embeddings", json=body).json()
    assert [(d["input_index"], d["start"], d["end"], d["tokens"]) for d in data] == [
        (d["input_index"], d["start"], d["end"], d["tokens"]) for d in online["data"]
    ]


def test_the_bounds_are_refused_saying_which(http, minilm_loaded):
    text = documents()[0]
    # MiniLM's max length is 256: 254 tokens besides [CLS] and [SEP].
    too_wide = http.post("/infer", json={"model_name": MINILM, "text": text, "chunking": {"max_tokens": 255}})
    assert "holds at most 254 tokens" in assert_error(too_wide, 400, "bad_request")
    assert http.post("/infer", json={"model_name": MINILM, "text": text, "chunking": {"max_tokens": 254}}).status_code == 200
    many = http.post("/infer", json={"model_name": MINILM, "text": text * 6, "chunking": {"max_tokens": 4}})
    assert "more than 1024 chunks" in assert_error(many, 413, "too_many_inputs")
    # One token a chunk: a word piece that alone takes two tokens ("##jou" is "jo ##u") cannot be one.
    tiny = http.post("/infer", json={"model_name": MINILM, "text": "the bijoux", "chunking": {"max_tokens": 1}})
    assert "alone takes 2 tokens" in assert_error(tiny, 400, "bad_request")
    overlap = http.post("/v1/embeddings", json={"model": MINILM, "input": "a", "chunking": {"max_tokens": 4, "overlap": 4}})
    assert overlap.status_code == 400 and overlap.json()["error"]["param"] == "chunking"
    assert "chunking.overlap (4) must be less than chunking.max_tokens (4)" in overlap.json()["error"]["message"]
    huge = http.post("/infer", json={"model_name": MINILM, "text": ["a" * 2_000_001], "chunking": {"max_tokens": 64}})
    assert "EMBEDGATE_MAX_CHUNKED_CHARACTERS" in assert_error(huge, 413, "body_too_large")
    # A chunked answer is JSON: one array per request is what a binary form carries.
    body = {"model_name": MINILM, "text": [text], "chunking": {"max_tokens": 64}}
    assert http.post("/infer", json=body, headers={"accept": "application/x-npy"}).status_code == 406
    either = http.post("/infer", json=body, headers={"accept": "application/x-npy, application/json;q=0.5"})
    assert either.status_code == 200 and either.json()["text_chunks"]
    sparse_like = http.post("/v2/embed", json={"model": MINILM, "texts": ["a"], "input_type": "search_document",
                                               "embedding_types": ["float"], "chunking": {"max_tokens": 8}})
    assert sparse_like.status_code in (400, 422)  # not a field of Cohere's API: refused, never ignored


def test_the_docs_pages_examples_run_as_written(gateway, http, minilm_loaded, minilm):
    """docs/chunking.md's curl and Python examples, against this gateway."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "chunking.md").read_text()
    path, body = page_curl(page)
    response = http.post(path, json=body)
    assert response.status_code == 200, response.text
    assert int(response.headers["x-cached-inputs"]) == 0  # the page's text is sent nowhere else
    (chunks,) = response.json()["text_chunks"]
    (text,) = body["text"]
    assert len(chunks) > 1 and all(chunk["tokens"] <= body["chunking"]["max_tokens"] for chunk in chunks)
    parts = [text[chunk["start"] : chunk["end"]] for chunk in chunks]
    assert cosine_rows([chunk["embedding"] for chunk in chunks], minilm.encode(parts)).min() >= 0.9999

    lines, names = page_python(page, gateway.url)
    assert len(lines) > 1 and all(line[0] == "0" and int(line[3]) <= 128 and line[4] == "384" for line in lines)
    # What it was answered: each chunk the library's vector of its span of the document.
    document, data = names["document"], names["result"].data
    parts = [document[item.model_dump()["start"] : item.model_dump()["end"]] for item in data]
    assert cosine_rows([item.embedding for item in data], minilm.encode(parts)).min() >= 0.9999
