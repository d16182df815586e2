"""TEI's errors on the TEI routes (``/tei``, ``/tei/...``) only: its shape, ``{"error": str,
"error_type": str}`` (``endpoints/schemas/tei.py``), and the statuses TEI answers with.

TEI has six error types, each with one status (``router/src/http/server.rs``, 1.9):
``Empty`` 400, ``Validation`` and ``Tokenizer`` 422, ``Backend`` 424 (TEI's answer to a
request the model cannot do, as well as to a failed inference), ``Overloaded`` 429,
``Unhealthy`` 503. The project's errors that TEI also has take TEI's type and status; the
rest (a missing key, an unknown model, a deadline, ...) keep their own status, with the
nearest type: ``Validation`` for a client error, ``Unhealthy`` for 503, ``Backend`` for
another server error.
"""

from __future__ import annotations

from typing import Any

from ...endpoints.schemas.tei import ErrorType

PREFIX = "/tei"

# The project's error codes that TEI answers too: TEI's type and status for them.
AS_TEI: dict[str, tuple[ErrorType, int]] = {
    "empty": ("Empty", 400),
    # TEI 1.9 answers every validation error with 422 (up to 1.8 too many inputs was 413).
    "invalid_request": ("Validation", 422),
    "bad_request": ("Validation", 422),
    "too_many_inputs": ("Validation", 422),
    "input_too_long": ("Validation", 422),
    "unknown_prompt": ("Validation", 422),
    "prompts_unsupported": ("Validation", 422),
    "unknown_route": ("Validation", 422),
    "wrong_model_kind": ("Backend", 424),
    "triton_error": ("Backend", 424),
    "overloaded": ("Overloaded", 429),
    "rate_limited": ("Overloaded", 429),
}


# What each status means on the TEI routes (their OpenAPI document).
TEI_WHY = {
    400: "Empty: no inputs, or an empty one; or a body that is not JSON.",
    401: "No API key, or an invalid one (the server has keys).",
    404: "The model is not loaded here (or, on /tei, the server has no default model), or the path is unknown.",
    409: "The model is in the repository but not loaded.",
    413: "The body is over the size limit.",
    406: "Accept names only binary forms the answer cannot take.",
    415: "The body is not JSON.",
    422: "Validation: a field is invalid, more inputs than one request may carry, an input longer than the model "
    "takes where cutting it is refused, a prompt the model does not have.",
    424: "Backend: the model's kind does not answer this route (e.g. an embedding model asked to rerank), or Triton "
    "failed the request.",
    429: "Overloaded: the model's requests in flight are at their limit, or the key is past its per-minute limit; "
    "try again after Retry-After seconds.",
    500: "Internal error; the message carries a request id to find it in the log.",
    503: "Unhealthy: starting, or Triton unavailable; try again after Retry-After seconds.",
    504: "The request's deadline passed.",
}


def is_tei_path(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def tei_error(status: int, code: str, message: str) -> tuple[int, dict[str, Any]]:
    """The status and body TEI would send for this error."""
    known = AS_TEI.get(code)
    if known is not None:
        error_type, status = known
    else:
        error_type = "Unhealthy" if status == 503 else "Backend" if status >= 500 else "Validation"
    return status, {"error": message, "error_type": error_type}
