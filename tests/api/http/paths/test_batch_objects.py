"""OpenAI's batch object, built from the store's record (``batch_object``): the fields they
share pass as they are, the store's own stay out, and what the object adds is worked out
from the progress."""

from embedgate.api.endpoints.schemas.batches import BatchFields, BatchObject
from embedgate.api.http.paths.batches import batch_object
from embedgate.api.jobs.records import BatchRecord, Progress

# OpenAI's batch object, as the official client reads it.
OPENAI_FIELDS = {
    "id", "object", "endpoint", "errors", "input_file_id", "completion_window", "status", "output_file_id",
    "error_file_id", "created_at", "in_progress_at", "expires_at", "finalizing_at", "completed_at", "failed_at",
    "expired_at", "cancelling_at", "cancelled_at", "request_counts", "metadata", "usage",
}


def record(**changes) -> BatchRecord:
    values = {
        "id": "batch_1", "input_file_id": "file-1", "endpoint": "/v1/embeddings", "completion_window": "24h",
        "status": "in_progress", "created_at": 10, "in_progress_at": 10, "expires_at": 86_410,
        "metadata": {"project": "a"}, "total": 5, "models": ["m"], "owner": "hash-of-a-key",
    }
    return BatchRecord(**values | changes)


def test_the_shared_fields_pass_as_they_are_and_the_stores_own_stay_out():
    batch = record(output_file_id="file-1-output")
    answer = batch_object(batch, Progress(chunks=2, done=1, completed=3, failed=1, tokens=40)).model_dump()
    assert set(answer) == OPENAI_FIELDS
    assert {name: answer[name] for name in BatchFields.model_fields} == batch.model_dump(include=set(BatchFields.model_fields))
    assert answer["object"] == "batch" and answer["errors"] is None
    assert answer["request_counts"] == {"total": 5, "completed": 3, "failed": 1}
    assert answer["usage"]["input_tokens"] == answer["usage"]["total_tokens"] == 40


def test_an_expired_batch_counts_what_never_ran_as_failed():
    answer = batch_object(record(status="expired", expired_at=90_000), Progress(3, 1, 2, 0, 7))
    assert answer.request_counts.model_dump() == {"total": 5, "completed": 2, "failed": 3}


def test_a_failed_batch_shows_its_errors_as_a_list_object():
    errors = [{"code": "mismatched_url", "message": "not the batch's endpoint", "line": 2, "param": "url"}]
    answer = batch_object(record(status="failed", failed_at=11, errors=errors), Progress(0, 0, 0, 0, 0))
    assert answer.model_dump()["errors"] == {"object": "list", "data": errors}


def test_the_schema_has_openais_fields_and_requires_what_it_did():
    schema = BatchObject.model_json_schema()
    assert set(schema["properties"]) == OPENAI_FIELDS
    assert set(schema["required"]) == {
        "id", "endpoint", "input_file_id", "completion_window", "status", "created_at", "request_counts", "usage"
    }
