"""The fast path answers exactly as the application does: every route it serves, with every
option, good and bad bodies, keys or none, answers the same status, body and headers (timings
aside) with the fast path and without it; and the requests it can serve do not reach FastAPI."""

from __future__ import annotations

import httpx
import pytest
from fastapi.testclient import TestClient

from embedgate.api.endpoints.envelope import Endpoint
from embedgate.api.http.app import create_app
from embedgate.api.http.fast_path import FastPath
from embedgate.api.settings import Settings

from ..conftest import FakeGateway
from .paths.test_cohere_routes import MULTIMODAL
from .paths.test_tei import RERANKER

IMAGE = "data:image/png;base64,AAAA"
MULTI_VECTOR = {"kind": "multi_vector_encoder"}
SPARSE = {"kind": "sparse_encoder"}

# (path, body): every route of the fast path, each option, and bodies it must hand to the application.
CASES = [
    ("/infer", {"model_name": "org/loaded", "text": ["a", "b c"]}),
    ("/infer", {"model_name": "org/loaded", "text": "one", "normalize": False, "precision": "binary"}),
    ("/infer", {"model_name": "org/loaded", "text": ["a"], "task": "query", "prompt": "q: "}),
    ("/infer", {"model_name": "org/loaded", "text": ["a"], "prompt_name": "nope"}),
    ("/infer", {"model_name": "org/loaded", "text": []}),
    ("/infer", {"model_name": "org/nothing", "text": ["a"]}),
    ("/infer", {"model_name": "org/on-disk", "text": ["a"]}),
    ("/infer", {"model_name": "../etc", "text": ["a"]}),
    ("/infer", {"model_name": "org/loaded", "text": ["a"] * 5}),
    ("/infer", {"model_name": "org/loaded", "text": ["a"], "extra": 1}),
    ("/infer", {"model_name": "org/loaded", "text": ["a"], "normalize": 1}),
    ("/infer", {"model_name": "org/loaded", "text": ["a"], "top_k": 2}),
    ("/v1/embeddings", {"model": "org/loaded", "input": ["a", "b"]}),
    ("/v1/embeddings", {"model": "org/loaded", "input": "a", "encoding_format": "base64", "dimensions": 2}),
    ("/v1/embeddings", {"model": "org/loaded", "input": "a", "encoding_format": "int8"}),
    ("/v1/embeddings", {"model": "org/loaded", "input": "a", "dimensions": 9}),
    ("/v1/embeddings", {"model": "org/loaded", "input": "a", "dimensions": 2.0}),
    ("/v1/embeddings", {"model": "org/loaded", "input": [1, 2]}),
    ("/v1/embeddings", {"model": "org/loaded", "input": []}),
    ("/v1/embeddings", {"model": "org/loaded", "input": "a", "input_type": "query"}),
    ("/rerank", {"model": "org/loaded", "query": "q", "documents": ["a", "bb"]}),
    ("/v1/rerank", {"model": "org/loaded", "query": "q", "documents": ["a", {"text": "bb"}], "top_n": 1,
                    "return_documents": True}),
    ("/predict", {"model": "org/loaded", "inputs": "a text"}),
    ("/tei/embed", {"inputs": ["a", "b"], "dimensions": 2, "normalize": False}),
    ("/tei/org/loaded/embed", {"inputs": "a", "truncate": False}),
    ("/tei/org/loaded/embed", {"inputs": ""}),
    ("/tei/org/nothing/embed", {"inputs": "a"}),
    ("/tei/org/loaded/similarity", {"inputs": {"source_sentence": "a", "sentences": ["b", "c"]}}),
    ("/tei/org/loaded/rerank", {"query": "q", "texts": ["a"]}),
    ("/tei/org/loaded/predict", {"inputs": "a"}),
    ("/tei/org/loaded/embed_sparse", {"inputs": "a"}),
    ("/tei/org/loaded/embed_all", {"inputs": "a"}),
    ("/infer", {"model_name": "org/mm", "text": ["a"], "image": [IMAGE]}),
    ("/infer", {"model_name": "org/loaded", "image": [IMAGE]}),
    ("/v2/embed", {"model": "org/loaded", "input_type": "search_document", "texts": ["a", "b c"]}),
    ("/v2/embed", {"model": "org/loaded", "input_type": "search_query", "texts": ["a"], "output_dimension": 2,
                   "embedding_types": ["float", "ubinary", "base64"], "priority": 1.0}),
    ("/v2/embed", {"model": "org/mm", "input_type": "image",
                   "inputs": [{"content": [{"type": "image_url", "image_url": {"url": IMAGE}}]},
                              {"content": [{"type": "text", "text": "a"}]}]}),
    ("/v2/embed", {"model": "org/mm", "input_type": "image", "images": [IMAGE], "embedding_types": ["int8"]}),
    ("/v2/embed", {"model": "org/loaded", "input_type": "image", "images": [IMAGE]}),
    ("/v2/embed", {"model": "org/loaded", "input_type": "search_document", "texts": ["a"], "truncate": "START"}),
    ("/v2/embed", {"model": "org/loaded", "input_type": "search_document", "texts": ["a"], "max_tokens": 3}),
    ("/v2/embed", {"model": "org/loaded", "input_type": "search_document", "texts": ["a"], "images": [IMAGE]}),
    ("/v2/embed", {"model": "org/loaded", "input_type": "search_document", "texts": []}),
    ("/v2/embed", {"model": "org/loaded", "input_type": "search_document", "texts": ["a"] * 5}),
    ("/v2/rerank", {"model": "org/reranker", "query": "q", "documents": ["a", "ccc", "bb"], "top_n": 2}),
    ("/v2/rerank", {"model": "org/reranker", "query": "q", "documents": ["a"], "max_tokens_per_doc": 4}),
    ("/v2/rerank", {"model": "org/loaded", "query": "q", "documents": ["a"]}),
    ("/v2/rerank", {"model": "org/nothing", "query": "q", "documents": ["a"]}),
]
TIMINGS = ("-time", "-time-ms")


def fast_path_gateway(settings: Settings) -> FakeGateway:
    """The fake gateway, with a multimodal model (texts and images) and a reranker beside its dense one."""
    gateway = FakeGateway(settings)
    gateway.registry.loaded_names |= {"org/mm", "org/reranker"}
    gateway.registry.changes.update({"org/mm": MULTIMODAL, "org/reranker": RERANKER})
    return gateway


def app_with(settings: Settings, gateway: FakeGateway, *, fast_path: bool):
    app = create_app(settings)
    if not fast_path:
        app.user_middleware = [middleware for middleware in app.user_middleware if middleware.cls is not FastPath]
    app.state.gateway = gateway
    return app


def app_client(settings: Settings, gateway: FakeGateway, *, fast_path: bool) -> TestClient:
    return TestClient(app_with(settings, gateway, fast_path=fast_path), raise_server_exceptions=False)


def async_client(settings: Settings, gateway: FakeGateway, *, fast_path: bool) -> httpx.AsyncClient:
    """The application in this event loop (TestClient starts a loop in a thread per request)."""
    transport = httpx.ASGITransport(app=app_with(settings, gateway, fast_path=fast_path), raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


def answered(response) -> tuple[int, object, dict[str, str]]:
    headers = {k: v for k, v in response.headers.items() if not k.endswith(TIMINGS) and k != "content-length"}
    try:
        body = response.json()
    except ValueError:
        body = response.text
    if isinstance(body, dict):
        body.pop("processingTimeMs", None)
        body.pop("id", None)  # Cohere's answers: an id of their own each
        if isinstance(body.get("error"), dict) and "request id" in body["error"].get("message", ""):
            body["error"]["message"] = "internal error"
    return response.status_code, body, headers


@pytest.mark.parametrize("keys", [False, True])
@pytest.mark.parametrize(("path", "body"), CASES)
async def test_the_fast_path_answers_as_the_application(path, body, keys):
    settings = Settings(max_texts_per_request=4, **({"api_keys": ["k1"]} if keys else {}))
    headers = {"authorization": "Bearer k1"} if keys else {}
    json_type = {**headers, "content-type": "application/json"}
    answers = []
    for fast_path in (True, False):
        async with async_client(settings, fast_path_gateway(settings), fast_path=fast_path) as client:
            answers.append(answered(await client.post(path, json=body, headers=headers)))
            answers.append(answered(await client.post(path, json=body)))  # no key (refused where keys are set)
            answers.append(answered(await client.post(path, content=b"{", headers=json_type)))
            answers.append(answered(await client.post(path, content=b"", headers=json_type)))
            answers.append(answered(await client.post(path, json=body, headers={**headers, "x-request-timeout": "0"})))
            answers.append(answered(await client.post(path, content=b"\xff\xfe", headers=json_type)))
    assert answers[:6] == answers[6:]


def test_the_requests_it_serves_do_not_reach_fastapi(monkeypatch, settings):
    through_fastapi = []
    original = Endpoint.__call__

    async def spied(self, *args, **kwargs):
        through_fastapi.append(type(self).__name__)
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(Endpoint, "__call__", spied)
    client = app_client(settings, fast_path_gateway(settings), fast_path=True)
    served = 0
    for path, body in CASES:
        before = len(through_fastapi)
        if client.post(path, json=body).status_code == 200:
            served += 1
            assert len(through_fastapi) == before, (path, body)
    assert served >= 8
    # A refusal before the request is charged goes to the application, which answers it.
    assert client.post("/infer", json={"model_name": "org/nothing", "text": ["a"]}).status_code == 404
    assert through_fastapi[-1] == "Infer"
