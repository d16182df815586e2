"""Late chunking through the real gateway and tritonserver (a gateway of its own, started with
EMBEDGATE_LATE_CHUNKING): each chunk's vector against the library itself, the model's token
embeddings (``encode(..., output_value="token_embeddings")``, or its forward on a window's
ids for a text longer than the model's window) averaged over the chunk's tokens, then the
model's modules after its Pooling; with prompts, a prompt left out of pooling, dimensions,
OpenAI's client and a batch job's line; refused, saying why, for a CLS model; the docs
page's examples with MiniLM. The gateway has its response cache on, which never answers a
late chunk (its vector depends on its whole text), while it keeps plain chunks."""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path

import numpy as np
import openai
import pytest
import torch

from tests import prompt_models, tiny_models
from tests.helpers import cosine_rows, page_curl, page_python

from .conftest import MINILM, models_loaded, run_batch, start_gateway, wait_ready

DENSE, LEFT_OUT, CLS = "org/late-dense", "org/late-left-out", "org/late-cls"


@pytest.fixture(scope="module")
def late_gateway(tmp_path_factory):
    root = tmp_path_factory.mktemp("late-chunking")
    server = start_gateway(root / "repository", root / "gateway.log", late_chunking="true")
    directories = {
        DENSE: prompt_models.prompts_dense_model(root / "dense"),
        LEFT_OUT: prompt_models.prompts_left_out_model(root / "left-out"),
        CLS: tiny_models.bert_cls_model(root / "cls"),
    }
    try:
        wait_ready(server)
        with models_loaded(server, directories):
            yield server, directories
    finally:
        server.stop()


@pytest.fixture(scope="module")
def libraries(late_gateway):
    from sentence_transformers import SentenceTransformer

    return {name: SentenceTransformer(str(path), device="cpu") for name, path in late_gateway[1].items()}


def document(words: int, seed: int | None = None) -> str:
    """A text of the tiny models' own words the server has not seen (a fresh order; ``seed``:
    a given one)."""
    pick = random.Random(uuid.uuid4().int if seed is None else seed)
    return " ".join(pick.choice(tiny_models.WORDS) for _ in range(words)) + "."


def pooled(library, row: list[int], spans: list[tuple[int, int]], whole_text: str | None) -> np.ndarray:
    """The library's vectors of ``spans`` of a row of token ids: its token embeddings (by
    ``encode`` of the text where the row is the text's, else its forward on the ids), each
    span's mean, then the modules after the Pooling."""
    with torch.no_grad():
        if whole_text is not None:
            (tokens,) = library.encode([whole_text], output_value="token_embeddings", convert_to_numpy=False, prompt="")
        else:
            ids = torch.tensor([row])
            tokens = library.forward({"input_ids": ids, "attention_mask": torch.ones_like(ids),
                                      "token_type_ids": torch.zeros_like(ids)})["token_embeddings"][0]
        assert len(tokens) == len(row)
        features = {"sentence_embedding": torch.stack([tokens[a:b].mean(dim=0) for a, b in spans])}
        for module in list(library)[2:]:
            features = module(features)
        return features["sentence_embedding"].numpy()


def reference(library, text: str, prompt: str, chunks: list[dict]) -> tuple[np.ndarray, int]:
    """Each chunk's vector as the library makes it, and the tokens of the rows it ran: the text with its prompt as the model
    tokenizes it, the chunk's tokens found by their characters (as many as the answer says),
    pooled in the whole text where it fits the max length, else in the window of the max
    length that holds the chunk with the most context on its poorer side (windows every half
    window, and one at the end)."""
    tokenizer = library.tokenizer
    encoded = tokenizer(prompt + text, return_offsets_mapping=True, return_special_tokens_mask=True)
    ids, offsets = encoded["input_ids"], encoded["offset_mapping"]
    own = [i for i, ((_, stop), special) in enumerate(zip(offsets, encoded["special_tokens_mask"]))
           if not special and stop > len(prompt)]
    head, body, tail = ids[: own[0]], ids[own[0] : own[-1] + 1], ids[own[-1] + 1 :]
    spans = []
    for chunk in chunks:
        inside = [i - own[0] for i in own if max(0, offsets[i][0] - len(prompt)) >= chunk["start"]
                  and offsets[i][1] - len(prompt) <= chunk["end"]]
        assert len(inside) == chunk["tokens"] and inside == list(range(inside[0], inside[-1] + 1))
        spans.append((inside[0], inside[-1] + 1))
    width = library.max_seq_length - len(head) - len(tail)
    if len(body) <= width:
        return pooled(library, ids, [(len(head) + a, len(head) + b) for a, b in spans], prompt + text), len(ids)
    starts = sorted(set(range(0, len(body) - width, width // 2)) | {len(body) - width})
    vectors, used = [], set()
    for a, b in spans:
        start = max((s for s in starts if s <= a and b <= s + width), key=lambda s: (min(a - s, s + width - b), -s))
        row = head + body[start : start + width] + tail
        used.add(start)
        vectors.append(pooled(library, row, [(len(head) + a - start, len(head) + b - start)], None)[0])
    return np.stack(vectors), len(used) * library.max_seq_length


@pytest.mark.parametrize("name", [DENSE, LEFT_OUT])
def test_late_chunks_are_the_librarys_token_vectors_pooled_over_each_chunk(late_gateway, libraries, name):
    """Texts of one window and of several (the tiny models' max length is 64 tokens), with
    the model's default prompt (its query prompt), an overlap and word boundaries."""
    server, _ = late_gateway
    library = libraries[name]
    texts = [document(30), document(150), "tiny"]
    chunking = {"max_tokens": 12, "overlap": 3, "boundary": "whitespace", "late": True}
    with server.client(timeout=60) as http:
        response = http.post("/infer", json={"model_name": name, "text": texts, "chunking": chunking})
        assert response.status_code == 200, response.text
        plain = http.post("/infer", json={"model_name": name, "text": texts, "chunking": {**chunking, "late": False}})
    chunks_of = response.json()["text_chunks"]
    assert [len(chunks) > 1 for chunks in chunks_of] == [True, True, False]
    prompt = prompt_models.PROMPTS[prompt_models.DEFAULT_PROMPT_NAME]
    for text, chunks in zip(texts, chunks_of):
        assert all(0 < chunk["tokens"] <= 12 for chunk in chunks)
        vectors = np.array([chunk["embedding"] for chunk in chunks])
        assert cosine_rows(vectors, reference(library, text, prompt, chunks)[0]).min() >= 0.9999
    # The same spans as plain chunks (cut the same way), but each vector carries its text's context.
    plain_chunks = plain.json()["text_chunks"]
    assert [[(c["start"], c["end"]) for c in chunks] for chunks in plain_chunks] == [
        [(c["start"], c["end"]) for c in chunks] for chunks in chunks_of
    ]
    late_vectors = np.array([chunk["embedding"] for chunk in chunks_of[0]])
    plain_vectors = np.array([chunk["embedding"] for chunk in plain_chunks[0]])
    assert cosine_rows(late_vectors, plain_vectors).max() < 0.999


def test_late_chunks_are_never_answered_from_the_response_cache(late_gateway, libraries):
    server, _ = late_gateway
    text = document(150)
    chunking = {"max_tokens": 12, "overlap": 3, "boundary": "whitespace"}
    late = {"model_name": DENSE, "text": [text], "chunking": {**chunking, "late": True}}
    with server.client(timeout=60) as http:
        # The same text's plain chunks first: the cache keeps those, each under its chunk's text.
        plain = [http.post("/infer", json={**late, "chunking": chunking}) for _ in range(2)]
        answers = [http.post("/infer", json=late) for _ in range(2)]
    assert [answer.status_code for answer in plain + answers] == [200] * 4
    assert plain[0].headers["x-cached-inputs"] == "0" and plain[1].headers["x-cached-inputs"] != "0"
    prompt = prompt_models.PROMPTS[prompt_models.DEFAULT_PROMPT_NAME]
    for answer in answers:
        assert answer.headers["x-cached-inputs"] == "0"
        (chunks,) = answer.json()["text_chunks"]
        vectors = np.array([chunk["embedding"] for chunk in chunks])
        assert cosine_rows(vectors, reference(libraries[DENSE], text, prompt, chunks)[0]).min() >= 0.9999


# A text whose last chunk is its last token alone, after a token of one character.
LAST_TOKEN_ALONE = (
    "text movie of brown awesome lazy is that of fell at it and in world model embedding food a that the hello is "
    "man the as dog over query fell stocks man the an by in server lazy world a."
)


def test_dimensions_and_a_named_prompt_apply_to_each_late_chunk(late_gateway, libraries):
    server, _ = late_gateway
    texts = [document(40), LAST_TOKEN_ALONE]
    body = {"model": DENSE, "input": texts, "input_type": "passage", "dimensions": 8,
            "chunking": {"max_tokens": 10, "late": True}}
    with server.client(timeout=60) as http:
        response = http.post("/v1/embeddings", json=body)
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert data[-1]["tokens"] == 1 and LAST_TOKEN_ALONE[data[-1]["start"] : data[-1]["end"]] == "."
    for index, text in enumerate(texts):
        chunks = [item for item in data if item["input_index"] == index]
        full = reference(libraries[DENSE], text, prompt_models.PROMPTS["passage"], chunks)[0][:, :8]
        vectors = np.array([chunk["embedding"] for chunk in chunks])
        assert vectors.shape[1] == 8
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
        assert cosine_rows(vectors, full).min() >= 0.9999


def test_openai_client_and_a_bulk_line_get_the_same_late_chunks(late_gateway, libraries):
    server, _ = late_gateway
    text = document(120)
    chunking = {"max_tokens": 16, "overlap": 4, "late": True}
    with openai.OpenAI(api_key="unused", base_url=f"{server.url}/v1", max_retries=0, timeout=60) as client:
        result = client.embeddings.create(model=DENSE, input=[text], extra_body={"chunking": chunking})
    data = [item.model_dump() for item in result.data]
    assert {item["input_index"] for item in data} == {0} and len(data) > 3
    prompt = prompt_models.PROMPTS[prompt_models.DEFAULT_PROMPT_NAME]
    expected, tokens = reference(libraries[DENSE], text, prompt, data)
    assert cosine_rows([item["embedding"] for item in data], expected).min() >= 0.9999
    # Usage: the tokens of the rows the model ran (windows of the max length), each once.
    assert result.usage.prompt_tokens == tokens and tokens > 64
    line = json.dumps({"custom_id": "late", "method": "POST", "url": "/v1/embeddings",
                       "body": {"model": DENSE, "input": [text], "chunking": chunking}})
    batch, output, errors = run_batch(server, [line], "/v1/embeddings")
    assert batch.status == "completed" and not errors
    lines = output["late"]["response"]["body"]["data"]
    assert [(d["start"], d["end"], d["tokens"]) for d in lines] == [(d["start"], d["end"], d["tokens"]) for d in data]
    assert cosine_rows([d["embedding"] for d in lines], expected).min() >= 0.9999


def test_a_cls_model_is_refused_saying_why_and_plain_chunks_still_serve(late_gateway):
    server, _ = late_gateway
    with server.client(timeout=60) as http:
        refused = http.post("/infer", json={"model_name": CLS, "text": ["a b"], "chunking": {"max_tokens": 8, "late": True}})
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert "no late chunking: its pooling is 'cls', not the mean of the tokens" in error["message"]
        assert http.post("/infer", json={"model_name": CLS, "text": ["a b"], "chunking": {"max_tokens": 8}}).status_code == 200
        listed = {model["model_name"]: model for model in http.get("/loaded_models").json()["models"]}
    assert listed[DENSE]["late_chunking"] and listed[DENSE]["late_chunking_refusal"] is None
    assert not listed[CLS]["late_chunking"] and "not the mean" in listed[CLS]["late_chunking_refusal"]
    # A mean-pooled model is two Triton models (its graph and its late-chunking graph); the CLS model, one.
    published = sorted(path.name for path in server.repository.iterdir() if path.name.startswith("org--late"))
    assert published == ["org--late-cls", "org--late-dense", "org--late-dense---late", "org--late-left-out",
                         "org--late-left-out---late"]


@pytest.fixture(scope="module")
def minilm_late(late_gateway):
    """MiniLM in the late gateway (converted here with its late-chunking graph), deleted after."""
    server, _ = late_gateway
    with server.client(timeout=600) as http:
        assert http.post("/load_sentence_transformer_model", json={"model_name": MINILM}).status_code == 200
        yield server
        assert http.post("/delete_model", json={"model_name": MINILM}).status_code == 200


def test_the_docs_pages_examples_run_as_written(minilm_late, minilm):
    """docs/late-chunking.md's curl and Python examples with MiniLM, each chunk against the
    library: the Python one's text is several of MiniLM's windows long."""
    server = minilm_late
    page = (Path(__file__).resolve().parents[2] / "docs" / "late-chunking.md").read_text()
    path, body = page_curl(page)
    with server.client(timeout=60) as http:
        response = http.post(path, json=body)
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    (text,) = body["input"]
    assert len(data) == 3 and text[data[1]["start"] : data[1]["end"]] == "It was built for the 1889 World Fair."
    expected, _ = reference(minilm, text, "", data)
    assert cosine_rows([item["embedding"] for item in data], expected).min() >= 0.9999

    lines, names = page_python(page, server.url)
    assert len(lines) > 10 and all(line[0] == "0" and int(line[3]) <= 64 and line[4] == "384" for line in lines)
    # What it was answered: each late chunk the library's, pooled over the whole document.
    chunks = [item.model_dump() for item in names["result"].data]
    expected, _ = reference(minilm, names["document"], "", chunks)
    assert cosine_rows([chunk["embedding"] for chunk in chunks], expected).min() >= 0.9999


def test_the_benchmark_runs_late_chunks(minilm_late, minilm_path):
    """bench/chunked_documents.py --late, briefly: every request answered, none from the cache,
    the model's tokens read from usage."""
    from embedgate.bench.chunked_documents import main

    report = minilm_late.repository.parent / "late-bench.json"
    main(["--url", minilm_late.url, "--model", MINILM, "--tokenizer", f"{minilm_path}/tokenizer.json",
          "--documents", "4", "--tokens", "600", "--max-tokens", "64", "--concurrency", "2", "--late",
          "--json", str(report)])
    result = json.loads(report.read_text())
    for phase in ("chunked", "as_inputs"):
        assert result[phase]["failed"] == 0 and result[phase]["cached_inputs"] == 0
        assert result[phase]["model_tokens"] > 4 * 600
    assert result["config"]["late"] and result["chunks_per_document"] > 9
