import pytest


def assert_error(response, status, code):
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["status"] == status
    assert body["error"]["code"] == code
    assert body["error"]["message"]
    return body["error"]["message"]


def test_infer_returns_seed_shape_and_timing_headers(client, gateway):
    response = client.post("/infer", json={"model_name": "org/loaded", "text": ["a", "b"]})
    assert response.status_code == 200
    body = response.json()
    assert body["text_embeddings"] == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    stages = {name: response.headers[f"x-{name}-time-ms"] for name in ("queue", "tokenize", "inference")}
    assert stages == {"queue": "0.30", "tokenize": "0.10", "inference": "0.20"}  # the service's own times
    assert response.headers["x-truncated-inputs"] == "0"
    # The total is the route's own clock, the same one the body reports.
    assert float(response.headers["x-total-time-ms"]) == pytest.approx(body["processingTimeMs"], abs=0.006)
    assert gateway.embeddings.calls == [("org/loaded", ["a", "b"], True)]


def test_a_single_string_is_accepted(client, gateway):
    response = client.post("/infer", json={"model_name": "org/loaded", "text": "one", "normalize": False})
    assert response.status_code == 200
    assert len(response.json()["text_embeddings"]) == 1
    assert gateway.embeddings.calls == [("org/loaded", ["one"], False)]


def test_unknown_model_is_404(client):
    assert "load it first" in assert_error(
        client.post("/infer", json={"model_name": "org/nothing", "text": ["a"]}), 404, "model_not_found"
    )


def test_model_on_disk_but_not_loaded_is_409(client):
    assert_error(client.post("/infer", json={"model_name": "org/on-disk", "text": ["a"]}), 409, "model_not_loaded")


@pytest.mark.parametrize("name", ["../../etc/passwd", "a b", "x--y"])
def test_hostile_model_names_are_422(client, name):
    assert_error(client.post("/infer", json={"model_name": name, "text": ["a"]}), 422, "invalid_model_name")


@pytest.mark.parametrize(
    "body",
    [
        {"model_name": "org/loaded", "text": [1, 2]},
        {"model_name": "org/loaded", "text": {"a": 1}},
        {"model_name": "org/loaded", "text": ["a"], "unexpected": 1},
        {"text": ["a"]},
        {"model_name": "org/loaded", "text": ["a"], "normalize": "maybe"},
    ],
)
def test_invalid_bodies_are_422(client, body):
    message = assert_error(client.post("/infer", json=body), 422, "invalid_request")
    assert "Traceback" not in message


@pytest.mark.parametrize("text", [[], None])
def test_empty_text_is_a_clear_400_not_a_crash(client, text):
    body = {"model_name": "org/loaded"}
    if text is not None:
        body["text"] = text
    assert "non-empty" in assert_error(client.post("/infer", json=body), 400, "bad_request")


def test_too_many_texts_is_413_and_names_the_limit(client):
    message = assert_error(
        client.post("/infer", json={"model_name": "org/loaded", "text": ["a"] * 5}), 413, "too_many_inputs"
    )
    assert "limit is 4" in message


def test_malformed_json_is_400(client):
    response = client.post("/infer", content=b'{"model_name": ', headers={"content-type": "application/json"})
    assert_error(response, 400, "malformed_json")


def test_unknown_route_uses_the_error_shape(client):
    assert_error(client.get("/nope"), 404, "not_found")
    assert_error(client.get("/infer"), 405, "method_not_allowed")


def test_internal_errors_do_not_leak_tracebacks(client, gateway):
    async def boom(*args, **kwargs):
        raise RuntimeError("secret internal detail")

    gateway.embeddings.answer = boom
    response = client.post("/infer", json={"model_name": "org/loaded", "text": ["a"]})
    message = assert_error(response, 500, "internal_error")
    assert "secret" not in response.text and "request id" in message


def test_client_deadline_is_used_within_its_bound(client, gateway, settings):
    seen = []

    async def record(model, ask, plan, *, timeout_s):
        seen.append(timeout_s)
        return await type(gateway.embeddings).answer(gateway.embeddings, model, ask, plan, timeout_s=timeout_s)

    gateway.embeddings.answer = record
    body = {"model_name": "org/loaded", "text": ["a"]}
    assert client.post("/infer", json=body).status_code == 200
    assert client.post("/infer", json=body, headers={"x-request-timeout": "2.5"}).status_code == 200
    assert client.post("/infer", json=body, headers={"x-request-timeout": "0.001"}).status_code == 200
    assert seen == [settings.request_timeout_s, 2.5, 0.001]


# A deadline below a millisecond is one nothing could meet: the client's mistake, not a 504.
@pytest.mark.parametrize("value", ["soon", "0", "-1", "nan", "inf", "100000", "5e-324", "0.0009"])
def test_bad_client_deadlines_are_400(client, value):
    response = client.post(
        "/infer", json={"model_name": "org/loaded", "text": ["a"]}, headers={"x-request-timeout": value}
    )
    assert_error(response, 400, "bad_request")


ROUTED = {
    "routes": [
        {"name": "query", "tasks": ["query"], "version": 1, "max_seq_length": 16,
         "parity": {"passed": True, "threshold": 0.9999, "min_cosine": 1.0, "sentences": 1}},
    ],
    "prompts": {"query": "query: ", "document": ""},
}


def test_the_task_chooses_the_route_and_its_prompt(client, gateway):
    gateway.registry.changes["org/loaded"] = ROUTED
    response = client.post("/infer", json={"model_name": "org/loaded", "text": ["a"], "task": "query"})
    assert response.status_code == 200, response.text
    assert gateway.embeddings.calls == [("org/loaded", ["query: a"], True)]
    message = assert_error(
        client.post("/infer", json={"model_name": "org/loaded", "text": ["a"], "task": "document"}), 400, "unknown_route"
    )
    assert "no route for task 'document'; its routes: 'query' (task 'query')" in message
    # prompt_name stands for its task's route where no task is given.
    assert client.post("/infer", json={"model_name": "org/loaded", "text": ["a"], "prompt_name": "query"}).status_code == 200
    assert_error(client.post("/infer", json={"model_name": "org/loaded", "text": ["a"]}), 400, "unknown_route")
    assert_error(client.post("/infer", json={"model_name": "org/loaded", "text": ["a"], "task": "passage"}), 422, "invalid_request")


def test_a_multi_vector_model_answers_a_vector_per_token(client, gateway):
    gateway.registry.changes["org/loaded"] = {
        "kind": "multi_vector_encoder", "normalized": True,
        "multi_vector": {"similarity": "maxsim", "query": {"max_length": 8}, "document": {"max_length": 16},
                         "default": {"max_length": 16}},
    }
    response = client.post("/infer", json={"model_name": "org/loaded", "text": ["a", "b"]})
    assert response.status_code == 200, response.text
    assert response.json()["multi_vector_embeddings"] == [[[0, 1, 2], [0.5, 1.5, 2.5]], [[3, 4, 5], [3.5, 4.5, 5.5]]]
    assert set(response.json()) == {"multi_vector_embeddings", "processingTimeMs"}
    refused = client.post("/infer", json={"model_name": "org/loaded", "text": ["a"], "top_k": 3})
    assert_error(refused, 400, "wrong_model_kind")
