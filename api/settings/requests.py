"""How the gateway handles requests: limits and deadlines, tokenizer threads, the response
cache, TEI's default model, the gateway's own batching (coalescing, spreading, admission by
cost) and the bulk lane's call sizes."""

from __future__ import annotations

from pydantic import BaseModel, Field


class RequestSettings(BaseModel):
    max_inflight_requests: int = Field(
        256, ge=1, description="Requests in flight in the gateway before 503."
    )
    max_texts_per_request: int = Field(2048, ge=1, description="Texts in one request before 413.")
    max_chunks_per_request: int = Field(
        1024, ge=1, description="Chunks the texts of one chunked request may make before 413."
    )
    max_chunked_characters: int = Field(
        2_000_000, ge=1, description="Characters of the texts of one chunked request before 413."
    )
    request_timeout_s: float = Field(30.0, gt=0, description="Deadline for one inference.")
    load_timeout_s: float = Field(600.0, gt=0, description="Deadline for a Triton load.")
    tokenizer_threads: int = Field(2, ge=1, description="Threads that tokenize off the event loop.")
    response_cache_mb: float = Field(
        64.0, ge=0, description="Bound of the response cache: the model outputs of inputs seen before, answered "
        "without running the model again (0 turns it off)."
    )
    max_request_timeout_s: float = Field(
        300.0, gt=0, description="Upper bound for a client's own deadline (X-Request-Timeout header)."
    )
    max_request_bytes: int = Field(
        16 * 1024 * 1024, ge=1024, description="Largest request body accepted (413 beyond)."
    )
    tei_model: str | None = Field(
        None, description="The model TEI's API serves at /tei: a loaded model's name ('<name>:<pretrained>' for a "
        "CLIP model); unset: the only loaded model. Every loaded model is also at /tei/<model>.",
    )
    gateway_batching: bool = Field(
        True,
        description="New sentence-transformers in the python form get no Triton dynamic batcher: the gateway "
        "merges their requests, one call running per model instance and one waiting.",
    )
    gateway_calls_in_flight: int = Field(0, ge=0, le=1024, description="Models the gateway batches: merged calls "
                                         "each gateway process keeps in flight per model (0: instances + 1).")
    coalesce_max_texts: int = Field(
        8, ge=0, le=4096,
        description="Requests of at most this many texts are merged with others waiting for the same model "
        "into shared tokenizer and Triton calls (0: never).",
    )
    admission_deadline_share: float = Field(
        0.8, ge=0, le=1,
        description="Admission by cost. Models the gateway batches: a request is refused at once (503, Retry-After) "
        "when its call, after the work queued before it at the model's measured speed, would end past this share of "
        "its deadline, and a waiting request whose call would end past this share of what remains is refused then. "
        "Models Triton batches (CLIP, the native form): a request is refused at once when the work admitted and not "
        "yet answered, with it, at the rate work is answered, would take more than this share of its deadline "
        "(0: admit by count only).",
    )
    spread_min_texts: int = Field(
        8, ge=0, le=4096,
        description="A request of at least twice this many texts, reaching a model (CPU instances, gateway "
        "batching) with idle instances, is cut into one call per idle instance, each of at least this many "
        "texts, run side by side (0: never).",
    )
    coalesce_in_flight: int = Field(
        24, ge=1, le=1024, description="Merged calls in flight per model; requests arriving meanwhile wait and merge."
    )
    bulk_busy_texts: int = Field(
        8, ge=1, le=4096,
        description="Bulk jobs: texts in one Triton call while online requests come and go (an online request "
        "arriving waits at most for a call this small).",
    )
    bulk_idle_texts: int = Field(
        64, ge=1, le=4096, description="Bulk jobs: texts in one Triton call once online requests have been quiet."
    )
    bulk_quiet_s: float = Field(
        0.25, ge=0, description="Bulk jobs: seconds without an online request before bulk calls grow."
    )
    max_concurrent_chunks: int = Field(
        4, ge=1, description="Triton calls (slices of max_batch_size texts) of one large request in flight at "
        "once (fairness to others); not a chunked request's chunks."
    )
