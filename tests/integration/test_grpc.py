"""TEI's gRPC API through the real gateway and tritonserver, called as gRPC clients call it:
TEI's Python client (``tei-client``, its ``GrpcClient``, sync and async) and the stubs the
build generates from ``api/grpc/proto/tei.proto``. Every method and stream of the five
services is checked against the library (``encode``, ``CrossEncoder.predict``, the sparse
and multi-vector encoders) and against the TEI HTTP route's answer for the same body, and
the errors against TEI's status codes.

One gateway for the module, with a key, a default model (the tiny dense one) and the gRPC
port; four tiny models, each converted once.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import grpc
import httpx
import numpy as np
import pytest

from embedgate.api.grpc.stubs import tei_pb2 as pb
from embedgate.api.grpc.stubs import tei_pb2_grpc as stubs
from tests import tiny_models
from tests.helpers import cosine_rows, free_port

from . import grpc_clients
from .conftest import start_gateway, wait_ready

KEY = "grpc-test-key"
DENSE = "org/grpc-dense"
RERANKER = "org/grpc-reranker"
CLASSIFIER = "org/grpc-classifier"
SPLADE = "org/grpc-splade"
COLBERT = "org/grpc-colbert"
TEXTS = ["gRPC clients embed this sentence.", "A second text, sent over TEI's gRPC API.", "naïve café, gRPC"]
QUERY = "which fox jumps over the dog over gRPC?"
DOCUMENTS = ["the quick brown fox jumps over the lazy dog (gRPC).", "stocks fell at the bank (gRPC)", "hello gRPC"]
LONG = " ".join(["the quick brown fox jumps over the lazy dog"] * 60)
AUTH = (("authorization", f"Bearer {KEY}"),)
# A model's requests in flight, and a stream's: a burst of unary calls overloads the model.
INFLIGHT = 4


def named(model: str) -> tuple[tuple[str, str], ...]:
    return (*AUTH, ("x-model", model))


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_dense):
    root = tmp_path_factory.mktemp("grpc")
    port = free_port()
    gateway = start_gateway(
        root / "repository", root / "gateway.log", grpc_port=str(port), api_keys=KEY, tei_model=DENSE,
        converter_warm_s="600", max_inflight_requests=str(INFLIGHT), grpc_stream_window=str(INFLIGHT),
    )
    directories = {
        DENSE: tiny_dense[0],
        RERANKER: tiny_models.cross_encoder(root / "reranker"),
        CLASSIFIER: tiny_models.classifier(root / "classifier"),
        SPLADE: tiny_models.sparse_encoder(root / "splade"),
        COLBERT: tiny_models.multi_vector_model(root / "colbert"),
    }
    try:
        wait_ready(gateway)
        with httpx.Client(base_url=gateway.url, timeout=600, headers={"authorization": f"Bearer {KEY}"}) as http:
            for name, directory in directories.items():
                response = http.post("/load_sentence_transformer_model",
                                     json={"model_name": name, "model_path": str(directory)})
                assert response.status_code == 200, response.text
        yield gateway, f"127.0.0.1:{port}", directories
    finally:
        gateway.stop()


@pytest.fixture(scope="module")
def library(served, tiny_dense):
    from sentence_transformers import CrossEncoder, MultiVectorEncoder, SparseEncoder

    _, _, directories = served
    return {
        DENSE: tiny_dense[1],
        RERANKER: CrossEncoder(str(directories[RERANKER]), device="cpu"),
        SPLADE: SparseEncoder(str(directories[SPLADE]), device="cpu"),
        COLBERT: MultiVectorEncoder(str(directories[COLBERT]), device="cpu"),
    }


@pytest.fixture(scope="module")
def channel(served):
    with grpc.insecure_channel(served[1]) as channel:
        yield channel


def http_answer(served, model: str, route: str, body: dict):
    gateway = served[0]
    response = httpx.post(f"{gateway.url}/tei/{model}/{route}", json=body, timeout=60,
                          headers={"authorization": f"Bearer {KEY}"})
    assert response.status_code == 200, response.text
    return response.json()


def tei_client(served, model: str | None = None):
    """tei-client's ``GrpcClient`` for the module's server, with the key (and a model's name)."""
    return grpc_clients.tei_client(served[1], named(model) if model else AUTH)


def test_info_answers_for_the_default_and_the_named_model(served, channel):
    info = stubs.InfoStub(channel)
    default = info.Info(pb.InfoRequest(), metadata=AUTH)
    assert default.model_id == DENSE and default.model_type == pb.MODEL_TYPE_EMBEDDING
    reranker = info.Info(pb.InfoRequest(), metadata=named(RERANKER))
    assert reranker.model_type == pb.MODEL_TYPE_RERANKER
    described = httpx.get(f"{served[0].url}/tei/{RERANKER}/info", headers={"authorization": f"Bearer {KEY}"}).json()
    assert reranker.max_input_length == described["max_input_length"] > 0
    assert reranker.max_client_batch_size == described["max_client_batch_size"]
    described = tei_client(served).info()
    assert described.server_model_id == DENSE and described.server_model_type.value == "embedding"


def test_embed_is_the_librarys_encode_and_the_http_routes_answer(served, channel, library):
    embed = stubs.EmbedStub(channel)
    unary = [embed.Embed(pb.EmbedRequest(inputs=text, normalize=True), metadata=AUTH) for text in TEXTS]
    streamed = list(embed.EmbedStream(iter(pb.EmbedRequest(inputs=text, normalize=True) for text in TEXTS),
                                      metadata=AUTH))
    expected = library[DENSE].encode(TEXTS, normalize_embeddings=True)
    http = http_answer(served, DENSE, "embed", {"inputs": TEXTS})
    for answers in (unary, streamed):
        vectors = np.array([answer.embeddings for answer in answers])
        assert cosine_rows(vectors, expected).min() >= 0.9999
        np.testing.assert_allclose(vectors, http, atol=1e-6)
    assert unary[0].metadata.compute_tokens > 0 and unary[0].metadata.compute_chars == len(TEXTS[0])
    # TEI's timing headers come as the unary response's metadata too, as TEI sends them.
    _, call = embed.Embed.with_call(pb.EmbedRequest(inputs=TEXTS[0], normalize=True), metadata=AUTH)
    headers = dict(call.initial_metadata())
    assert int(headers["x-compute-tokens"]) == unary[0].metadata.compute_tokens
    assert {"x-compute-time", "x-total-time", "x-tokenization-time", "x-queue-time", "x-inference-time",
            "x-compute-characters"} <= set(headers)
    # Not normalized unless asked (proto3's false), as TEI's gRPC answers.
    raw = embed.Embed(pb.EmbedRequest(inputs=TEXTS[0]), metadata=AUTH).embeddings
    np.testing.assert_allclose(raw, library[DENSE].encode(TEXTS[:1])[0], rtol=1e-4, atol=1e-5)


def test_tei_clients_sync_and_async_embeddings(served, library):
    client = tei_client(served)
    expected = library[DENSE].encode(TEXTS, normalize_embeddings=True)
    assert cosine_rows(np.array(client.embed(TEXTS)), expected).min() >= 0.9999

    async def embedded():
        client = tei_client(served)
        return await client.async_embed(TEXTS), await client.async_tokenize(TEXTS[0])

    vectors, tokens = asyncio.run(embedded())
    assert cosine_rows(np.array(vectors), expected).min() >= 0.9999
    assert tokens[0].get_ids() == library[DENSE].tokenizer(TEXTS[0])["input_ids"]


def test_embed_sparse_is_the_sparse_encoders_non_zero_weights(served, channel, library):
    embed = stubs.EmbedStub(channel)
    texts = [f"{text} (sparse)" for text in TEXTS]
    unary = [embed.EmbedSparse(pb.EmbedSparseRequest(inputs=text), metadata=named(SPLADE)) for text in texts]
    streamed = list(embed.EmbedSparseStream(iter(pb.EmbedSparseRequest(inputs=t) for t in texts),
                                            metadata=named(SPLADE)))
    expected = library[SPLADE].encode(texts, convert_to_sparse_tensor=False).numpy()
    http = http_answer(served, SPLADE, "embed_sparse", {"inputs": texts})
    for answers in (unary, streamed):
        for answer, want, row in zip(answers, expected, http):
            indices = [value.index for value in answer.sparse_embeddings]
            assert indices == np.flatnonzero(want).tolist() == [value["index"] for value in row]
            np.testing.assert_allclose([v.value for v in answer.sparse_embeddings], want[indices], rtol=1e-4, atol=1e-5)


def test_embed_all_is_the_multi_vector_models_token_vectors(served, channel, library):
    embed = stubs.EmbedStub(channel)
    texts = [f"{text} (token vectors)" for text in TEXTS]
    unary = [embed.EmbedAll(pb.EmbedAllRequest(inputs=text), metadata=named(COLBERT)) for text in texts]
    expected = library[COLBERT].encode(texts)
    by_client = tei_client(served, COLBERT).embed_all(texts)  # its calls are EmbedAllStream

    async def embedded_all():
        return await tei_client(served, COLBERT).async_embed_all(texts)

    assert np.allclose(np.concatenate(asyncio.run(embedded_all())), np.concatenate(by_client), atol=1e-6)
    http = http_answer(served, COLBERT, "embed_all", {"inputs": texts})
    for answer, theirs, client_rows, http_rows in zip(unary, expected, by_client, http):
        ours = np.array([token.embeddings for token in answer.token_embeddings])
        assert ours.shape == np.asarray(theirs).shape and cosine_rows(ours, theirs).min() >= 0.9999
        np.testing.assert_allclose(client_rows, ours, atol=1e-6)
        np.testing.assert_allclose(http_rows, ours, atol=1e-6)


def test_predict_and_pairs_are_the_cross_encoders_scores(served, channel, library):
    predict = stubs.PredictStub(channel)
    model = library[RERANKER]
    single = predict.Predict(pb.PredictRequest(inputs=QUERY), metadata=named(RERANKER))
    assert single.predictions[0].score == pytest.approx(float(model.predict(QUERY)), abs=1e-4)
    pairs = [[QUERY, document] for document in DOCUMENTS]
    expected = model.predict(pairs)
    unary = [predict.PredictPair(pb.PredictPairRequest(inputs=pair), metadata=named(RERANKER)) for pair in pairs]
    streamed = list(predict.PredictPairStream(iter(pb.PredictPairRequest(inputs=p) for p in pairs),
                                              metadata=named(RERANKER)))
    http = http_answer(served, RERANKER, "predict", {"inputs": pairs})
    for answers in (unary, streamed):
        scores = [answer.predictions[0].score for answer in answers]
        np.testing.assert_allclose(scores, expected, atol=1e-4)
        np.testing.assert_allclose(scores, [row[0]["score"] for row in http], atol=1e-6)
    texts = list(predict.PredictStream(iter(pb.PredictRequest(inputs=d) for d in DOCUMENTS), metadata=named(RERANKER)))
    expected_texts = [float(model.predict(document)) for document in DOCUMENTS]
    np.testing.assert_allclose([a.predictions[0].score for a in texts], expected_texts, atol=1e-4)
    with pytest.raises(grpc.RpcError) as refused:
        predict.PredictPair(pb.PredictPairRequest(inputs=["a", "b", "c"]), metadata=named(RERANKER))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_a_classifiers_labels_as_teis_predict(served, channel):
    """TEI's probabilities (a softmax over the labels), as the HTTP route answers them (whose
    answers tests/integration/test_tei.py holds to the library's logits)."""
    pairs = [(QUERY, document) for document in DOCUMENTS]
    http = http_answer(served, CLASSIFIER, "predict", {"inputs": [list(pair) for pair in pairs]})
    client = tei_client(served, CLASSIFIER)

    async def classified():
        return await tei_client(served, CLASSIFIER).async_classify(list(pairs))

    for answers in (client.classify(list(pairs)), asyncio.run(classified())):
        assert len(answers) == len(pairs)
        for answer, row in zip(answers, http):
            assert [score.label for score in answer.scores] == [item["label"] for item in row]
            np.testing.assert_allclose([s.score for s in answer.scores], [item["score"] for item in row], atol=1e-6)
    single = stubs.PredictStub(channel).Predict(pb.PredictRequest(inputs=QUERY), metadata=named(CLASSIFIER))
    assert [p.label for p in single.predictions] == [
        item["label"] for item in http_answer(served, CLASSIFIER, "predict", {"inputs": QUERY})]


def test_rerank_and_its_stream_rank_as_the_library(served, channel, library):
    rerank = stubs.RerankStub(channel)
    expected = library[RERANKER].predict([[QUERY, document] for document in DOCUMENTS])
    ranked = rerank.Rerank(pb.RerankRequest(query=QUERY, texts=DOCUMENTS, return_text=True), metadata=named(RERANKER))
    streamed = rerank.RerankStream(
        iter(pb.RerankStreamRequest(query=QUERY, text=document, return_text=True) for document in DOCUMENTS),
        metadata=named(RERANKER),
    )
    http = http_answer(served, RERANKER, "rerank", {"query": QUERY, "texts": DOCUMENTS, "return_text": True})
    for answer in (ranked, streamed):
        assert [rank.index for rank in answer.ranks] == list(np.argsort(-expected, kind="stable"))
        assert [rank.index for rank in answer.ranks] == [rank["index"] for rank in http]
        for rank in answer.ranks:
            assert rank.score == pytest.approx(float(expected[rank.index]), abs=1e-4)
            assert rank.text == DOCUMENTS[rank.index]
    by_client = tei_client(served, RERANKER).rerank(QUERY, DOCUMENTS).ranks
    assert [(rank.index, rank.score) for rank in by_client] == [(rank.index, rank.score) for rank in ranked.ranks]

    async def reranked():
        return (await tei_client(served, RERANKER).async_rerank(QUERY, DOCUMENTS)).ranks

    assert [rank.index for rank in asyncio.run(reranked())] == [rank.index for rank in ranked.ranks]


def test_tokenize_and_decode_as_the_http_routes(served, channel, library):
    tokenize = stubs.TokenizeStub(channel)
    text = "naïve café: gRPC tokenizes this"
    tokens = tokenize.Tokenize(pb.EncodeRequest(inputs=text, add_special_tokens=True), metadata=AUTH).tokens
    http = http_answer(served, DENSE, "tokenize", {"inputs": text})[0]
    assert [(t.id, t.text, t.special) for t in tokens] == [(t["id"], t["text"], t["special"]) for t in http]
    assert [t.start if t.HasField("start") else None for t in tokens] == [t["start"] for t in http]
    streamed = list(tokenize.TokenizeStream(iter([pb.EncodeRequest(inputs=text, add_special_tokens=True)] * 2),
                                            metadata=AUTH))
    assert [list(answer.tokens) for answer in streamed] == [list(tokens)] * 2
    ids = [token.id for token in tokens]
    decoded = tokenize.Decode(pb.DecodeRequest(ids=ids, skip_special_tokens=True), metadata=AUTH).text
    assert decoded == http_answer(served, DENSE, "decode", {"ids": ids})[0] == library[DENSE].tokenizer.decode(
        ids, skip_special_tokens=True)
    assert [a.text for a in tokenize.DecodeStream(iter([pb.DecodeRequest(ids=ids, skip_special_tokens=True)]),
                                                  metadata=AUTH)] == [decoded]
    client = tei_client(served)
    assert client.tokenize(text)[0].get_ids() == ids
    assert client.decode(ids) == decoded

    async def decoded_async():
        return await tei_client(served).async_decode(ids)

    assert asyncio.run(decoded_async()) == decoded


def test_errors_are_teis_status_codes(served, channel):
    embed = stubs.EmbedStub(channel)
    cases = [
        # bad input: empty (TEI's Empty), too long without truncate (Validation)
        (embed.Embed, pb.EmbedRequest(inputs=""), AUTH, grpc.StatusCode.INVALID_ARGUMENT),
        (embed.Embed, pb.EmbedRequest(inputs=LONG), AUTH, grpc.StatusCode.INVALID_ARGUMENT),
        (embed.Embed, pb.EmbedRequest(inputs="a"), named("org/no-such-model"), grpc.StatusCode.NOT_FOUND),
        # a kind that does not answer: TEI's Backend error
        (stubs.RerankStub(channel).Rerank, pb.RerankRequest(query="q", texts=["a"]), AUTH,
         grpc.StatusCode.FAILED_PRECONDITION),
        (embed.Embed, pb.EmbedRequest(inputs="a"), named(SPLADE), grpc.StatusCode.FAILED_PRECONDITION),
        (embed.Embed, pb.EmbedRequest(inputs="a"), (), grpc.StatusCode.UNAUTHENTICATED),
        (embed.Embed, pb.EmbedRequest(inputs="a"), (("authorization", "Bearer wrong"),),
         grpc.StatusCode.UNAUTHENTICATED),
    ]
    for method, request, metadata, code in cases:
        with pytest.raises(grpc.RpcError) as refused:
            method(request, metadata=metadata)
        assert refused.value.code() == code, (request, metadata, refused.value.details())
    # Cut when asked, as TEI's truncate.
    assert len(embed.Embed(pb.EmbedRequest(inputs=LONG, truncate=True), metadata=AUTH).embeddings) > 0
    # A stream ends with the status of its first failed request, after the answers before it.
    answers = embed.EmbedStream(iter([pb.EmbedRequest(inputs="fine"), pb.EmbedRequest(inputs="")]), metadata=AUTH)
    assert len(next(answers).embeddings) > 0
    with pytest.raises(grpc.RpcError) as refused:
        next(answers)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_overload_is_resource_exhausted_with_teis_error_type(served, channel):
    embed = stubs.EmbedStub(channel)
    calls = [embed.Embed.future(pb.EmbedRequest(inputs=f"burst number {index}"), metadata=AUTH) for index in range(64)]
    codes = [call.code() for call in calls]
    assert set(codes) == {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}, codes
    refused = next(call for call in calls if call.code() == grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert dict(refused.trailing_metadata()) == {"error_type": "Overloaded", "retry-after": "1"}


def test_an_expired_deadline_is_deadline_exceeded(served, channel):
    embed = stubs.EmbedStub(channel)
    with pytest.raises(grpc.RpcError) as expired:
        embed.Embed(pb.EmbedRequest(inputs=LONG * 8, truncate=True), metadata=AUTH, timeout=0.001)
    assert expired.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


def test_a_cancelled_stream_stops_costing_work(served, channel):
    gateway = served[0]
    method = "/tei.v1.Embed/EmbedStream"

    def endless():
        index = 0
        while True:
            index += 1
            yield pb.EmbedRequest(inputs=f"sentence number {index} of an endless stream")

    answers = stubs.EmbedStub(channel).EmbedStream(endless(), metadata=AUTH)
    for _ in range(5):
        next(answers)
    answers.cancel()
    headers = {"authorization": f"Bearer {KEY}"}

    def cancelled() -> float:
        return gateway.metric("embedgate_grpc_requests_total", headers, method=method, code="CANCELLED")

    deadline = time.monotonic() + 10
    while cancelled() < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cancelled() >= 1
    # Every request run on the model is timed (the inference stage): none runs after the cancel.
    def inferences() -> float:
        return gateway.metric("embedgate_inference_stage_seconds_count", headers, model=DENSE, stage="inference")

    ran = inferences()
    time.sleep(0.5)
    assert inferences() == ran
    assert gateway.metric("embedgate_grpc_stream_messages_total", headers, method=method) >= 5
    # The server serves on.
    assert len(stubs.EmbedStub(channel).Embed(pb.EmbedRequest(inputs="after"), metadata=AUTH).embeddings) > 0


def test_health_reflection_and_metrics(served, channel):
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "tei.v1.Embed", "tei.v1.Info"):
        checked = health.Check(health_pb2.HealthCheckRequest(service=service))
        assert checked.status == health_pb2.HealthCheckResponse.SERVING, service
    reflected = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")])
    )
    names = {service.name for service in next(reflected).list_services_response.service}
    assert {"tei.v1.Info", "tei.v1.Embed", "tei.v1.Predict", "tei.v1.Rerank", "tei.v1.Tokenize"} <= names
    gateway = served[0]
    headers = {"authorization": f"Bearer {KEY}"}
    assert gateway.metric("embedgate_grpc_requests_total", headers, method="/tei.v1.Embed/Embed", model=DENSE,
                          code="OK") >= 1


def test_a_stream_outlives_a_triton_restart(served, channel, library):
    """Last: tritonserver killed under a stream is restarted, and the stream's requests in
    flight are sent again (as HTTP requests are): every request is answered, in order."""
    gateway = served[0]
    [triton] = gateway.children("tritonserver")
    texts = [f"sentence {index} of a stream across a restart" for index in range(40)]

    def requests():
        for index, text in enumerate(texts):
            if index == 10:
                os.kill(triton, signal.SIGKILL)
            yield pb.EmbedRequest(inputs=text, normalize=True)
            time.sleep(0.01)

    answers = list(stubs.EmbedStub(channel).EmbedStream(requests(), metadata=AUTH, timeout=120))
    vectors = np.array([answer.embeddings for answer in answers])
    assert len(answers) == len(texts)
    assert cosine_rows(vectors, library[DENSE].encode(texts, normalize_embeddings=True)).min() >= 0.9999
    assert gateway.children("tritonserver") != [triton]
