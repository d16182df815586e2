"""Schemathesis hooks of the OpenAPI contract test, loaded by schemathesis.toml: what the
document cannot say because it is the clock's or the server's state, each kept narrow."""

import schemathesis

DEADLINE_HEADER = "x-request-timeout"
# The server's default deadline (EMBEDGATE_REQUEST_TIMEOUT_S).
FLOOR_S = 30.0


@schemathesis.hook
def before_call(context, case, kwargs):
    """A valid X-Request-Timeout shorter than the default is sent as the default.

    The document allows a deadline in [0.001, max_request_timeout_s] (one below a
    millisecond, 5e-324 s say, is refused with 400: nothing could meet it), and the server
    answers one too short to meet with 504 deadline_exceeded (documented). Drawn freely a
    deadline is often a few milliseconds, which would make the contract test a timing test.
    Invalid values (below the minimum, over the maximum, not a number) are left alone: they
    must still be refused with 400.
    """
    for name, value in list((case.headers or {}).items()):
        if name.lower() != DEADLINE_HEADER:
            continue
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            continue
        if 0 < seconds < FLOOR_S:
            case.headers[name] = str(FLOOR_S)


# Refusals that depend on the loaded model, by path: (code, param) of each 400 forgiven.
WRONG_KIND = ("wrong_model_kind", None)
STATE_DEPENDENT = {
    "/v1/embeddings": [("bad_request", "dimensions"), WRONG_KIND],
    "/infer": [("unknown_prompt", None), WRONG_KIND],
    # Uploads name a multimodal model, or a CLIP model with its pretrained: MiniLM takes no images.
    "/infer_image": [WRONG_KIND],
    "/rerank": [("unknown_prompt", None), WRONG_KIND],
    "/v1/rerank": [("unknown_prompt", None), WRONG_KIND],
    "/predict": [("unknown_prompt", None), WRONG_KIND],
    # A batch file's lines are JSON requests: what a schema of a binary file cannot say.
    "/v1/files": [("invalid_batch_file", None)],
}


CHUNKING_REFUSALS = [
    ("bad_request", "a chunk of this model holds at most"), ("bad_request", "tokens of this model: ask for larger"),
    ("bad_request", "must be less than chunking.max_tokens"), ("bad_request", "without its late-chunking graph"),
]


# Cohere's routes (the project's error shape, which names no param): each forgiven 400 told by
# its code and the words of its message: a max length below the model's own, int8/uint8 the
# model (or its images, or a cut dimension) has no ranges for, dimensions above its own, a
# text past its length where truncate is NONE, a request its kind does not answer.
WORDS_STATE_DEPENDENT = {
    "/v2/embed": [
        ("bad_request", "max_tokens below"),
        ("bad_request", "embedding_types"),
        ("bad_request", "dimensions must be at most"),
        ("input_too_long", "truncate is NONE"),
        ("wrong_model_kind", ""),
    ],
    "/v2/rerank": [("bad_request", "max_tokens_per_doc below"), ("wrong_model_kind", "")],
    # Chunking: max_tokens past what the loaded model's window holds beside its prompt and
    # special tokens, or below what one of the text's tokens takes alone (the model's
    # tokenizer), an overlap not below max_tokens (a relation JSON Schema cannot state), and
    # late chunks of a model the server published no late-chunking graph of.
    "/infer": CHUNKING_REFUSALS,
    "/v1/embeddings": CHUNKING_REFUSALS,
}


# TEI's routes answer the same refusals in TEI's shape, which carries no code: each is told
# by its status, TEI's error type and the words of its message.
TEI_STATE_DEPENDENT = [
    (424, "Backend", " gives no "),  # a request the model's kind does not answer
    (422, "Validation", "has no prompt named"),  # a prompt_name the model has no prompt of
    (422, "Validation", "dimensions must be at most"),  # dimensions above the model's own
    (422, "Validation", "inputs that fit are answered"),  # an input past the model's length, cutting refused
]


def forgiven_tei(path: str, response) -> bool:
    try:
        body = response.json()
        refusal = (response.status_code, body["error_type"])
        message = body["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return any(refusal == (status, kind) and words in message for status, kind, words in TEI_STATE_DEPENDENT)


@schemathesis.hook
def filter_failure(context, failure, case, response):
    """Every failure counts but four, each a refusal of a valid-looking value that only the
    loaded model can judge, server state no document can carry: /v1/embeddings refusing a
    ``dimensions`` above the named model's own size (400 bad_request, param "dimensions";
    the schema says ``dimensions >= 1`` and its description says the rest); a
    ``prompt_name`` the model has no prompt of (400 unknown_prompt; which prompts a model
    has, /loaded_models says); and a request the model's kind does not answer (400
    wrong_model_kind: reranking with the embedding model loaded here, ``top_k`` for a dense
    model, predicting with it; each model's kind, /loaded_models says); and an uploaded batch file whose lines
    are not JSON requests (400 invalid_batch_file, naming the first bad line: a schema
    describes the upload as a binary file). Cohere's routes: the same refusals and its own
    (``WORDS_STATE_DEPENDENT``); with it too, chunking's: a ``max_tokens`` past what the
    loaded model's window holds or below what one token's text takes alone, an
    ``overlap`` not below ``max_tokens``, and late chunks of a model without their graph.
    TEI's routes: the same refusals in TEI's terms (``TEI_STATE_DEPENDENT``; a base URL takes a body of any of TEI's routes, and answers
    it as that route does). A run drops them and says how many it dropped."""
    path = case.operation.path
    if failure.code == "ST202" and (path == "/tei" or path.startswith("/tei/")):
        return not forgiven_tei(path, response)
    forgiven = STATE_DEPENDENT.get(path)
    worded = WORDS_STATE_DEPENDENT.get(path)
    if failure.code != "ST202" or response.status_code != 400 or (forgiven is None and worded is None):
        return True
    try:
        error = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        return True
    if worded is not None and any(error.get("code") == code and words in error.get("message", "") for code, words in worded):
        return False
    return not any(
        error.get("code") == code and (param is None or error.get("param") == param) for code, param in forgiven or ()
    )
