"""Bodies of OpenAI's Files and Batch APIs, as OpenAI defines them (what the official client
reads), for the bulk jobs this server runs.

A batch's fields are OpenAI's batch object's (:class:`BatchFields`), declared once here: the
job store's record adds what only the store keeps (``jobs/records.py``), and the object the
Batch API answers (:class:`BatchObject`) adds what the route works out from the batch's
progress (``http/paths/batches.py``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

BatchStatus = Literal[
    "validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled"
]
MetadataKey = Annotated[str, StringConstraints(max_length=64)]
MetadataValue = Annotated[str, StringConstraints(max_length=512)]


class BatchFields(BaseModel):
    """A batch's fields that OpenAI's batch object shows, in OpenAI's order (the job store
    keeps them as they are)."""

    id: str
    endpoint: str
    input_file_id: str
    completion_window: str
    status: BatchStatus
    output_file_id: str | None = None
    error_file_id: str | None = None
    created_at: int
    in_progress_at: int | None = None
    # Optional in OpenAI's object; every batch in the store has one (``BatchRecord``).
    expires_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    metadata: dict[str, str] | None = None


class FileObject(BaseModel):
    id: str
    object: Literal["file"] = "file"
    bytes: int
    created_at: int
    filename: str
    purpose: Literal["batch", "batch_output"]
    status: Literal["processed"] = "processed"
    expires_at: int | None = None
    status_details: str | None = None


class FileList(BaseModel):
    object: Literal["list"] = "list"
    data: list[FileObject]
    has_more: bool = False


class FileDeleted(BaseModel):
    id: str
    object: Literal["file"] = "file"
    deleted: bool


class BatchCreateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    input_file_id: str = Field(min_length=1, max_length=200, description="An uploaded file of purpose 'batch'.")
    endpoint: Literal["/v1/embeddings", "/v1/rerank", "/v2/embed"] = Field(
        description="The endpoint every line calls (/v2/embed: Cohere's, whose lines may carry images).",
        examples=["/v1/embeddings"],
    )
    completion_window: Literal["24h"] = Field(
        description="The batch expires, with what ran, if not done by then."
    )
    metadata: dict[MetadataKey, MetadataValue] | None = Field(
        None, max_length=16, description="Up to 16 key-value pairs kept with the batch."
    )
    output_expires_after: dict[str, Any] | None = Field(
        None, description="Accepted for OpenAI's clients; output files stay until deleted."
    )


class BatchError(BaseModel):
    code: str
    message: str
    line: int | None = None
    param: str | None = None


class BatchErrors(BaseModel):
    object: Literal["list"] = "list"
    data: list[BatchError]


class RequestCounts(BaseModel):
    total: int
    completed: int
    failed: int


class TokenDetails(BaseModel):
    cached_tokens: int = 0


class OutputTokenDetails(BaseModel):
    reasoning_tokens: int = 0


class BatchUsage(BaseModel):
    input_tokens: int
    input_tokens_details: TokenDetails = Field(default_factory=TokenDetails)
    output_tokens: int = 0
    output_tokens_details: OutputTokenDetails = Field(default_factory=OutputTokenDetails)
    total_tokens: int


class BatchObject(BatchFields):
    # The batch's fields, and what the route works out as it answers:
    object: Literal["batch"] = "batch"
    errors: BatchErrors | None = None
    request_counts: RequestCounts
    usage: BatchUsage


class BatchList(BaseModel):
    object: Literal["list"] = "list"
    data: list[BatchObject]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool
