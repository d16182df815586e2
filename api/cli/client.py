"""A small synchronous client for a running embedgate server (the CLI's commands use it).

Errors come back as :class:`ServerError` with the server's status, code and message,
whichever of the two error shapes (the project's or OpenAI's) the route answered in.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, BinaryIO

import httpx

NDJSON = "application/x-ndjson"
DEFAULT_URL = "http://127.0.0.1:8686"

ProgressHandler = Callable[[dict[str, Any]], None]


class ServerError(Exception):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


def _error_from(status: int, body: Any) -> ServerError:
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        # A stream's last event carries the status the load would have answered with.
        status = error.get("status") if isinstance(error.get("status"), int) else status
        return ServerError(status, str(error.get("code", "error")), str(error.get("message", "")))
    return ServerError(status, "error", "the server answered with an error but no error body")


def _checked(response: httpx.Response) -> Any:
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code >= 400:
        raise _error_from(response.status_code, body)
    return body


def _timings(response: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k.startswith("x-") and k.endswith("-ms")}


def _named(model_name: str, pretrained: str | None) -> dict[str, str]:
    """How requests name a model: a CLIP model also by its pretrained."""
    return {"model_name": model_name, **({"pretrained": pretrained} if pretrained else {})}


class EmbedgateClient:
    def __init__(
        self,
        url: str = DEFAULT_URL,
        api_key: str | None = None,
        timeout: float = 60.0,
        *,
        http: httpx.Client | None = None,
    ):
        """``http``: an httpx client to send through instead (an in-process app in tests)."""
        self._owns_http = http is None
        self._http = http or httpx.Client(base_url=url, timeout=timeout)
        if api_key:
            self._http.headers["authorization"] = f"Bearer {api_key}"
        self.timeout = timeout

    def __enter__(self) -> EmbedgateClient:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._owns_http:
            self._http.close()

    def load(
        self,
        model_name: str,
        model_path: str | None = None,
        *,
        pretrained: str | None = None,
        trust_remote_code: bool = False,
        optimize: bool = False,
        quantize: str | None = None,
        revision: str | None = None,
        on_source_change: str | None = None,
        on_progress: ProgressHandler | None = None,
    ) -> dict[str, Any]:
        """Load (converting first if needed), following the server's progress events.
        With ``pretrained``, an OpenCLIP model; ``optimize`` or ``quantize`` load a variant;
        ``revision`` the hub's branch, tag or commit of a model from the hub;
        ``on_source_change`` "refuse": a 409 rather than a conversion again from a changed source."""
        body: dict[str, Any] = {"model_name": model_name}
        if pretrained:
            path, body["pretrained"] = "/load_clip_model", pretrained
        else:
            path = "/load_sentence_transformer_model"
        # Only the options given: the server's defaults are the others'.
        options = {
            "model_path": model_path, "trust_remote_code": trust_remote_code, "optimize": optimize,
            "quantize": quantize, "revision": revision, "on_source_change": on_source_change,
        }
        body.update({name: value for name, value in options.items() if value})
        # No read deadline: a conversion can take minutes, and the server enforces its own.
        timeout = httpx.Timeout(self.timeout, read=None)
        with self._http.stream(
            "POST", path, json=body, headers={"accept": NDJSON}, timeout=timeout
        ) as response:
            if response.status_code >= 400 or not response.headers.get("content-type", "").startswith(NDJSON):
                response.read()
                return _checked(response)
            for line in response.iter_lines():
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("event") == "progress":
                    if on_progress is not None:
                        on_progress(event)
                elif event.get("event") == "done":
                    return event["result"]
                else:
                    raise _error_from(500, event)
        raise ServerError(502, "incomplete", "the server closed the stream before the load finished")

    def unload(self, model_name: str, pretrained: str | None = None) -> dict[str, Any]:
        return _checked(self._http.post("/unload_model", json=_named(model_name, pretrained)))

    def delete(self, model_name: str, pretrained: str | None = None) -> dict[str, Any]:
        return _checked(self._http.post("/delete_model", json=_named(model_name, pretrained)))

    def models(self, *, include_unloaded: bool = False) -> list[dict[str, Any]]:
        path = "/repository_models" if include_unloaded else "/loaded_models"
        return _checked(self._http.get(path))["models"]

    def embed(
        self,
        model_name: str,
        texts: list[str],
        *,
        pretrained: str | None = None,
        normalize: bool = True,
        prompt_name: str | None = None,
        precision: str = "float32",
    ) -> tuple[list, dict[str, str]]:
        """The embeddings (dense rows, or a sparse encoder's ``{"indices", "values"}``), and
        the response's timing headers."""
        body: dict[str, Any] = {**_named(model_name, pretrained), "text": texts}
        # Sent only when asked: a sparse encoder refuses normalize=true, which is the default.
        if not normalize:
            body["normalize"] = False
        if prompt_name is not None:
            body["prompt_name"] = prompt_name
        if precision != "float32":
            body["precision"] = precision
        response = self._http.post("/infer", json=body)
        answer = _checked(response)
        rows = answer["sparse_embeddings"] if "sparse_embeddings" in answer else answer["text_embeddings"]
        return rows, _timings(response)

    def rerank(
        self, model_name: str, query: str, documents: list[str], *, top_n: int | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """A cross-encoder's results, best first, with their documents; and the timing headers."""
        body: dict[str, Any] = {"model": model_name, "query": query, "documents": documents, "return_documents": True}
        if top_n is not None:
            body["top_n"] = top_n
        response = self._http.post("/rerank", json=body)
        return _checked(response)["results"], _timings(response)

    # --- bulk jobs (OpenAI's Files and Batch APIs)
    def upload_batch_file(self, filename: str, content: bytes) -> dict[str, Any]:
        files = {"file": (filename, content, "application/jsonl")}
        return _checked(self._http.post("/v1/files", files=files, data={"purpose": "batch"}))

    def create_batch(self, input_file_id: str, endpoint: str) -> dict[str, Any]:
        body = {"input_file_id": input_file_id, "endpoint": endpoint, "completion_window": "24h"}
        return _checked(self._http.post("/v1/batches", json=body))

    def batch(self, batch_id: str) -> dict[str, Any]:
        return _checked(self._http.get(f"/v1/batches/{batch_id}"))

    def cancel_batch(self, batch_id: str) -> dict[str, Any]:
        return _checked(self._http.post(f"/v1/batches/{batch_id}/cancel"))

    def batches(self, limit: int = 20) -> list[dict[str, Any]]:
        return _checked(self._http.get("/v1/batches", params={"limit": limit}))["data"]

    def download(self, file_id: str, sink: BinaryIO) -> None:
        with self._http.stream("GET", f"/v1/files/{file_id}/content") as response:
            if response.status_code >= 400:
                response.read()
                _checked(response)
            for block in response.iter_bytes():
                sink.write(block)
