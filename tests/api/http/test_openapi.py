"""The OpenAPI document says what the server does: object schemas for the answers, every
error status with its body, name patterns, and bounds from the running server's settings."""

import pytest
from fastapi.testclient import TestClient

from embedgate.api.endpoints.schemas import patterns
from embedgate.api.http.app import create_app
from embedgate.api.settings import Settings

JSON = "application/json"
# (method, path) -> the object the 200 answer is.
ANSWERS = {
    ("get", "/health"): "LiveResponse",
    ("get", "/health/ready"): "ReadyResponse",
    ("post", "/infer"): "InferResponse",
    ("post", "/infer_image"): "InferResponse",
    ("post", "/v1/embeddings"): "EmbeddingsResponse",
    ("get", "/v1/models"): "ModelsResponse",
    ("get", "/v1/models/{model}"): "Model",
    ("post", "/rerank"): "RerankResponse",
    ("post", "/v1/files"): "FileObject",
    ("get", "/v1/files"): "FileList",
    ("get", "/v1/files/{file_id}"): "FileObject",
    ("delete", "/v1/files/{file_id}"): "FileDeleted",
    ("post", "/v1/batches"): "BatchObject",
    ("get", "/v1/batches"): "BatchList",
    ("get", "/v1/batches/{batch_id}"): "BatchObject",
    ("post", "/v1/batches/{batch_id}/cancel"): "BatchObject",
    ("post", "/v1/rerank"): "RerankResponse",
    ("post", "/v2/embed"): "CohereEmbedResponse",
    ("post", "/v2/rerank"): "CohereRerankResponse",
    ("get", "/metrics"): "MetricsResponse",
    ("get", "/loaded_models"): "ModelList",
    ("get", "/repository_models"): "ModelList",
    ("post", "/load_sentence_transformer_model"): "LoadResponse",
    ("post", "/load_clip_model"): "LoadClipResponse",
    ("post", "/unload_model"): "MessageResponse",
    ("post", "/delete_model"): "MessageResponse",
}


def document(settings: Settings) -> dict:
    return TestClient(create_app(settings)).get("/openapi.json").json()


@pytest.fixture(scope="module")
def doc():
    """The document of the server the other API tests ask (``tests/api/conftest.py``'s
    settings), made once: every test here only reads it."""
    return document(Settings(max_texts_per_request=4))


def operations(doc):
    for path, methods in doc["paths"].items():
        for method, operation in methods.items():
            yield method, path, operation


def component(doc, ref: str) -> dict:
    return doc["components"]["schemas"][ref.rpartition("/")[2]]


# TEI's routes, under the default model's base URL and under any model's.
TEI_BASES = ("/tei", "/tei/{model}")
TEI_ROUTES = ("/embed", "/embed_sparse", "/embed_all", "/similarity", "/rerank", "/predict", "/tokenize", "/decode")


def error_shape(path: str) -> str:
    if path.startswith("/v1/"):
        return "OpenAIErrorResponse"
    return "TeiErrorResponse" if path == "/tei" or path.startswith("/tei/") else "ErrorResponse"


def test_every_operation_is_listed(doc):
    # Answers that are not JSON objects: Prometheus text, a file's bytes, TEI's list of predictions,
    # TEI's answers (lists), its health (no body) and its /info (an object).
    others = {("get", "/metrics/prometheus"), ("get", "/v1/files/{file_id}/content"), ("post", "/predict")}
    for base in TEI_BASES:
        others |= {("post", base), ("get", f"{base}/health"), ("get", f"{base}/info")}
        others |= {("post", f"{base}{route}") for route in TEI_ROUTES}
    assert {(method, path) for method, path, _ in operations(doc)} == set(ANSWERS) | others


@pytest.mark.parametrize("method, path", list(ANSWERS))
def test_the_200_answer_is_its_object(doc, method, path):
    schema = doc["paths"][path][method]["responses"]["200"]["content"][JSON]["schema"]
    assert schema == {"$ref": f"#/components/schemas/{ANSWERS[method, path]}"}
    answer = component(doc, schema["$ref"])
    assert answer["type"] == "object" and answer["properties"]


def test_every_error_has_its_body_in_the_shape_of_its_path(doc):
    for _, path, operation in operations(doc):
        shape = error_shape(path)
        for status, answer in operation["responses"].items():
            if status.startswith(("4", "5")):
                ref = answer["content"][JSON]["schema"]["$ref"]
                assert ref.endswith(shape) or (path, status) == ("/health/ready", "503"), (path, status)
    assert "HTTPValidationError" not in doc["components"]["schemas"]


def test_the_statuses_each_kind_of_route_can_answer(doc):
    def statuses(method, path):
        return set(doc["paths"][path][method]["responses"])

    inference = {"200", "400", "404", "409", "413", "415", "429", "500", "502", "503", "504"}
    # /infer may answer one array in a binary form (406: the client takes only those, and
    # the answer is two arrays); OpenAI's answer is JSON whatever the client accepts.
    assert statuses("post", "/infer") == inference | {"406", "422"}
    assert set(doc["paths"]["/infer"]["post"]["responses"]["200"]["content"]) == {JSON, "application/x-npy", "application/octet-stream"}
    # /v1 answers invalid requests with 400, as OpenAI does: never 422.
    assert statuses("post", "/v1/embeddings") == inference
    assert {"403", "507"} <= statuses("post", "/load_sentence_transformer_model")
    assert statuses("get", "/loaded_models") == {"200", "500", "503"}
    assert statuses("get", "/health") == {"200"}


def test_415_is_documented_wherever_a_body_is_read(doc):
    with_bodies = [(path, op) for _, path, op in operations(doc) if "requestBody" in op]
    # The native API's 12, Cohere's 2, and TEI's routes and base URL under each of its two bases.
    assert len(with_bodies) == 12 + 2 + 2 * (len(TEI_ROUTES) + 1)
    for path, operation in with_bodies:
        assert "415" in operation["responses"], path


def test_predict_answers_in_teis_shape(doc):
    operation = doc["paths"]["/predict"]["post"]
    answer = operation["responses"]["200"]["content"][JSON]["schema"]
    # One input: its predictions; a batch: a list of those.
    shapes = [option.get("items", {}) for option in answer["anyOf"]]
    assert {"$ref": "#/components/schemas/Prediction"} in shapes
    assert {"type": "array", "items": {"$ref": "#/components/schemas/Prediction"}} in shapes
    inputs = component(doc, operation["requestBody"]["content"][JSON]["schema"]["$ref"])["properties"]["inputs"]
    assert [option["type"] for option in inputs["anyOf"]] == ["string", "array", "array"]


def test_503_says_when_to_retry(doc):
    answer = doc["paths"]["/infer"]["post"]["responses"]["503"]
    assert answer["headers"]["Retry-After"]["schema"] == {"type": "integer", "minimum": 0}


def test_429_says_when_to_retry_and_what_is_left(doc):
    answer = doc["paths"]["/v1/embeddings"]["post"]["responses"]["429"]
    assert answer["headers"]["Retry-After"]["schema"] == {"type": "integer", "minimum": 0}
    assert {"x-ratelimit-remaining-requests", "x-ratelimit-reset-tokens"} <= set(answer["headers"])


def test_timing_headers_are_declared(doc):
    headers = doc["paths"]["/v1/embeddings"]["post"]["responses"]["200"]["headers"]
    assert headers["x-total-time-ms"]["required"] and headers["x-inference-time-ms"]["required"]


def test_model_names_carry_the_pattern_the_server_enforces(doc):
    schemas = doc["components"]["schemas"]
    for name in ("InferRequest", "ModelRequest", "LoadSentenceTransformerRequest"):
        assert schemas[name]["properties"]["model_name"]["pattern"] == patterns.MODEL_NAME
    assert schemas["LoadClipRequest"]["properties"]["model_name"]["pattern"] == patterns.CLIP_ARCHITECTURE
    assert schemas["EmbeddingsRequest"]["properties"]["model"]["pattern"] == patterns.OPENAI_MODEL
    (parameter,) = doc["paths"]["/v1/models/{model}"]["get"]["parameters"]
    assert parameter["schema"]["pattern"] == patterns.OPENAI_MODEL
    # With a pretrained, the model is a CLIP model: an architecture.
    clip_only = schemas["InferRequest"]["allOf"][0]["then"]["properties"]["model_name"]
    assert clip_only["pattern"] == patterns.CLIP_ARCHITECTURE


def test_the_upload_form_says_what_a_pretrained_means_and_has_no_null(doc):
    # A form field is left out or a string: a null would be sent as the text "null", a pretrained.
    upload = doc["paths"]["/infer_image"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    form = component(doc, upload["$ref"])
    assert form["then"]["properties"]["model_name"]["pattern"] == patterns.CLIP_ARCHITECTURE
    assert form["properties"]["model_name"]["pattern"] == patterns.MODEL_NAME
    assert form["properties"]["pretrained"]["type"] == "string" and "null" not in str(form)


def test_bounds_are_the_running_servers_settings():
    doc = document(Settings(max_texts_per_request=4, max_images_per_request=3, max_request_timeout_s=60))
    schemas = doc["components"]["schemas"]

    def max_items(schema):
        return [branch["maxItems"] for branch in schema["anyOf"] if branch.get("type") == "array"]

    assert max_items(schemas["InferRequest"]["properties"]["text"]) == [4]
    assert max_items(schemas["InferRequest"]["properties"]["image"]) == [3]
    assert max_items(schemas["EmbeddingsRequest"]["properties"]["input"]) == [4]
    upload = doc["paths"]["/infer_image"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert component(doc, upload["$ref"])["properties"]["image"]["maxItems"] == 3
    (deadline,) = doc["paths"]["/infer"]["post"]["parameters"]
    assert deadline["name"] == "X-Request-Timeout" and deadline["schema"]["maximum"] == 60
    assert "x-from-settings" not in str(doc)


def test_without_keys_nothing_claims_them(doc):
    assert "securitySchemes" not in doc.get("components", {})
    assert all("security" not in op and "401" not in op["responses"] for _, _, op in operations(doc))


@pytest.mark.parametrize(
    "api_keys, admin_keys, forbidden", [(["k"], ["a"], True), (["k"], [], False), ([], ["a"], False)]
)
def test_with_keys_the_routes_behind_them_say_so(api_keys, admin_keys, forbidden):
    doc = document(Settings(api_keys=api_keys, admin_keys=admin_keys))
    assert doc["components"]["securitySchemes"]["apiKey"] == {
        "type": "http", "scheme": "bearer", "description": "An API key (or an admin key)."
    }  # fmt: skip
    for method, path, operation in operations(doc):
        if path.startswith("/health") or path.endswith("/health"):
            assert "security" not in operation and "401" not in operation["responses"]
            continue
        assert operation["security"] == [{"apiKey": []}], path
        unauthorized = operation["responses"]["401"]
        assert unauthorized["headers"]["WWW-Authenticate"], path
        assert unauthorized["content"][JSON]["schema"]["$ref"].endswith(error_shape(path)), path
        managing = path in ("/unload_model", "/delete_model", "/load_sentence_transformer_model", "/load_clip_model")
        # Loads can also refuse trust_remote_code or a path outside the allowed directories.
        if managing and not path.startswith("/load"):
            assert ("403" in operation["responses"]) == forbidden, path


def test_bodies_are_strict_as_the_schema_says(client):
    # 1 is not a boolean in the schema, so the server does not take it for one.
    response = client.post("/infer", json={"model_name": "org/loaded", "text": ["a"], "normalize": 1})
    assert response.status_code == 422
    text_two = client.post("/v1/embeddings", json={"model": "org/loaded", "input": "a", "dimensions": "2"})
    assert text_two.status_code == 400
    # 2.0 is an integer in JSON Schema: taken as 2.
    response = client.post("/v1/embeddings", json={"model": "org/loaded", "input": "a", "dimensions": 2.0})
    assert response.status_code == 200 and len(response.json()["data"][0]["embedding"]) == 2


@pytest.mark.parametrize("value, status", [("1_0", 400), ("0x10", 400), ("1e1", 200), (".5", 200)])
def test_a_deadline_is_a_decimal_number_as_documented(client, value, status):
    body = {"model_name": "org/loaded", "text": ["a"]}
    assert client.post("/infer", json=body, headers={"x-request-timeout": value}).status_code == status
