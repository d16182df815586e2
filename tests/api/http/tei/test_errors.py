"""TEI's error shape and statuses: the project's errors that TEI has take TEI's type and
status; the others keep their own status with the nearest type; only TEI's paths."""

import pytest

from embedgate.api.endpoints.statuses import STATUS
from embedgate.api.http.errors import error_response_for
from embedgate.api.http.tei.errors import AS_TEI, TEI_WHY, is_tei_path, tei_error


@pytest.mark.parametrize(
    "status, code, expected",
    [
        (400, "empty", (400, "Empty")),
        (413, "too_many_inputs", (422, "Validation")),  # TEI 1.9 (413 up to 1.8)
        (400, "bad_request", (422, "Validation")),
        (400, "unknown_prompt", (422, "Validation")),
        (400, "wrong_model_kind", (424, "Backend")),
        (502, "triton_error", (424, "Backend")),
        (503, "overloaded", (429, "Overloaded")),
        (429, "rate_limited", (429, "Overloaded")),
        (503, "triton_unavailable", (503, "Unhealthy")),
        (404, "model_not_found", (404, "Validation")),
        (409, "model_not_loaded", (409, "Validation")),
        (401, "unauthorized", (401, "Validation")),
        (400, "malformed_json", (400, "Validation")),
        (504, "deadline_exceeded", (504, "Backend")),
        (500, "internal_error", (500, "Backend")),
    ],
)
def test_each_error_in_teis_terms(status, code, expected):
    answered, body = tei_error(status, code, "what went wrong")
    assert (answered, body["error_type"]) == expected
    assert body == {"error": "what went wrong", "error_type": expected[1]}


def test_every_status_tei_answers_is_described():
    assert {status for _, status in AS_TEI.values()} <= set(TEI_WHY)
    assert {400, 404, 413, 422, 424, 429, 503} <= set(TEI_WHY)


def test_only_teis_paths_answer_in_its_shape():
    assert is_tei_path("/tei") and is_tei_path("/tei/embed") and is_tei_path("/tei/org/name/rerank")
    assert not is_tei_path("/teigen") and not is_tei_path("/rerank") and not is_tei_path("/v1/embeddings")
    tei = error_response_for("/tei/embed", 413, "too_many_inputs", "too many", {"x-a": "1"})
    assert tei.status_code == 422 and tei.headers["x-a"] == "1"
    native = error_response_for("/teigen", 413, "too_many_inputs", "too many")
    assert native.status_code == 413 and b'"code":"too_many_inputs"' in native.body
    assert STATUS  # the native table is untouched by TEI's
