"""What can go wrong, in the gateway's own words: a stable machine code and a message.

These errors say what went wrong, never which HTTP status it becomes: that mapping lives
in one place, ``api/endpoints/statuses.py``, which the HTTP face and a batch job's lines
read. Every layer below the endpoints raises these and imports nothing above it.
"""

from __future__ import annotations


class EmbedgateError(Exception):
    """A failure a client should hear about: ``code`` is stable, ``message`` is for people."""

    code = "internal_error"
    # Seconds after which trying again may work (overload, a restart); None: it will not.
    retry_after_s: int | None = None

    def __init__(self, message: str, *, retry_after_s: int | None = None):
        super().__init__(message)
        self.message = message
        if retry_after_s is not None:
            self.retry_after_s = retry_after_s


# --- the request itself
class InvalidInput(EmbedgateError):
    code = "bad_request"


class InvalidOption(InvalidInput):
    """A bad value for one request parameter; OpenAI's error shape names it in ``param``."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


class InvalidModelName(EmbedgateError):
    code = "invalid_model_name"


class TooManyInputs(EmbedgateError):
    code = "too_many_inputs"


class BodyTooLarge(EmbedgateError):
    code = "body_too_large"


class NotAcceptable(EmbedgateError):
    """The client accepts no form the answer can take (a binary answer of several arrays)."""

    code = "not_acceptable"


class UnsupportedMediaType(EmbedgateError):
    """The body comes in a content type the route does not read."""

    code = "unsupported_media_type"


class PromptError(InvalidInput):
    """A prompt the request asks for that the model cannot give: ``unknown_prompt`` (no
    prompt of that name, or for that input type; the message lists the model's prompts) or
    ``prompts_unsupported`` (the model takes no prompts; the message says why). ``param``
    names the request field at fault."""

    def __init__(self, code: str, message: str, param: str):
        super().__init__(message)
        self.code = code
        self.param = param


class UnknownRoute(InvalidInput):
    """A task the model has no route for (its Router routes other tasks only): the message
    names the routes it has."""

    code = "unknown_route"


class WrongModelKind(InvalidInput):
    """The model is of a kind that does not answer this request (a cross-encoder asked for
    embeddings, a dense model asked to rerank); the message says where to go instead."""

    code = "wrong_model_kind"


class Empty(InvalidInput):
    """No inputs, or an empty one (TEI's ``Empty`` error)."""

    code = "empty"


class InputTooLong(InvalidInput):
    """An input longer than the model takes, where the request forbade cutting it."""

    code = "input_too_long"


class InvalidImage(EmbedgateError):
    """One image of a request cannot be used. The code says why: ``image_url_refused``
    (scheme, or an address the fetcher may not reach), ``image_fetch_failed``,
    ``image_too_large`` or ``invalid_image``; the message names the image."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


class InvalidBatchFile(InvalidInput):
    """An uploaded batch file that cannot be run: the message names the first bad line."""

    code = "invalid_batch_file"

    def __init__(self, message: str, line: int | None = None):
        super().__init__(message if line is None else f"line {line}: {message}")
        self.line = line


class FileNotFound(EmbedgateError):
    code = "file_not_found"


class BatchNotFound(EmbedgateError):
    code = "batch_not_found"


class BatchStateConflict(EmbedgateError):
    """The batch is in a state that does not allow this (cancelling a completed batch)."""

    code = "batch_state_conflict"


# --- who is asking
class Unauthorized(EmbedgateError):
    code = "unauthorized"


class Forbidden(EmbedgateError):
    code = "forbidden"


class TrustRemoteCodeRequired(Forbidden):
    """A model that runs code of its own (its modeling files, custom modules), loaded
    without ``trust_remote_code``: the message says what code, and how to allow it."""

    code = "trust_remote_code_required"


class HubDownloadDisabled(Forbidden):
    """A model that is nowhere on this host (no model_path, no installed package, not in the
    hub cache) while downloads from the hub are off: the message names the setting."""

    code = "hub_download_disabled"


class HubAccessDenied(Forbidden):
    """The hub refused a gated or private model to the server's token (or to no token): the
    message names HF_TOKEN, the server's environment variable it comes from."""

    code = "hub_access_denied"


# --- models
class ModelNotFound(EmbedgateError):
    code = "model_not_found"


class NoDefaultModel(ModelNotFound):
    """A request names no model and the server has no default one to serve (TEI's ``/tei``)."""

    code = "no_default_model"


class ModelNotLoaded(EmbedgateError):
    """In the repository but not loaded: ``key`` is the model (a registry key), for a load on
    its first request."""

    code = "model_not_loaded"

    def __init__(self, message: str, *, key: str | None = None):
        super().__init__(message)
        self.key = key


class ModelConflict(EmbedgateError):
    """The repository holds something else under the model's name."""

    code = "model_conflict"


class ConversionTargetExists(ModelConflict):
    """Another conversion published the model first."""


class SourceChanged(ModelConflict):
    """The repository's copy of the model was made from another source than the load
    names, and the load asked to be refused rather than convert again."""

    code = "source_changed"


class ConversionFailed(EmbedgateError):
    code = "conversion_failed"


class UnsupportedModel(ConversionFailed):
    """A model that cannot be served exactly as asked (its kind, its modules, custom code):
    the message says why; nothing was published."""

    code = "unsupported_model"


class ConversionCrashed(EmbedgateError):
    code = "conversion_crashed"


class ConversionOutOfMemory(EmbedgateError):
    code = "conversion_out_of_memory"


class InsufficientStorage(EmbedgateError):
    code = "insufficient_storage"


class MemoryBudgetExceeded(EmbedgateError):
    """A load that would pass the memory budget, with no idle model to unload that frees enough."""

    code = "memory_budget_exceeded"


class RepositoryUnavailable(EmbedgateError):
    code = "repository_unavailable"
    retry_after_s = 5


# --- the model hub, where a load downloads a model
class HubTimeout(EmbedgateError):
    """The hub stopped sending a model's files (past huggingface_hub's timeouts and retries);
    the files that arrived whole are kept, and the next load downloads the rest."""

    code = "hub_timeout"


class HubUnavailable(EmbedgateError):
    """The hub could not be reached, cut the connection for good or answered with a server
    error; the files that arrived whole are kept, and the next load downloads the rest."""

    code = "hub_unavailable"


# --- capacity and time
class Overloaded(EmbedgateError):
    code = "overloaded"
    retry_after_s = 1


class RateLimited(EmbedgateError):
    """A key past its configured per-minute limit. ``standing`` is what it has left
    (``compute/rates.Standing``), for OpenAI's rate-limit headers."""

    code = "rate_limited"
    retry_after_s = 1

    def __init__(self, message: str, *, retry_after_s: int | None = None, standing: object = None):
        super().__init__(message, retry_after_s=retry_after_s)
        self.standing = standing


class NotReady(EmbedgateError):
    """The gateway is still starting."""

    code = "starting"


class DeadlineExceeded(EmbedgateError):
    code = "deadline_exceeded"


# --- Triton and the cluster behind the gateway
class TritonUnavailable(EmbedgateError):
    code = "triton_unavailable"
    retry_after_s = 1


class TritonConnectionLost(TritonUnavailable):
    """The connection to Triton broke: the process is gone (or going)."""


class ModelProcessLost(TritonUnavailable):
    """Triton runs, but the process of one of its models (a Python-backend stub) died:
    that model answers nothing until it is loaded again. ``part`` is the Triton model."""

    def __init__(self, message: str, part: str = ""):
        super().__init__(message)
        self.part = part


class TritonError(EmbedgateError):
    code = "triton_error"


class PrimaryUnavailable(EmbedgateError):
    """A gateway worker lost its line to the server's primary process (which runs Triton
    and the model lifecycle): it stopped, or is restarting the worker."""

    code = "primary_unavailable"
    retry_after_s = 1


class ReplicaLoadFailed(EmbedgateError):
    code = "replica_load_failed"


class ClusterConfigError(EmbedgateError):
    code = "cluster_config_error"
