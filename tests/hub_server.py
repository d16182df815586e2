"""A model hub on 127.0.0.1 for the tests: the part of the Hugging Face hub's HTTP protocol
that huggingface_hub (and through it sentence-transformers, transformers and open_clip)
uses to download a model, serving tiny models the tests build, under hub names.

- ``GET /api/models/{repo}`` and ``/api/models/{repo}/revision/{revision}``: the model's
  info (its commit ``sha``, its ``siblings`` with sizes and blob ids where ``blobs`` is asked);
- ``GET /api/models/{repo}/tree/{revision}[/{path}]``: the listing of its files and folders;
- ``HEAD``/``GET /{repo}/resolve/{revision}/{file}``: a small file itself (``ETag`` its git
  blob id, ``X-Repo-Commit``), a weights file (as the hub does for LFS files) a redirect to
  a second server on another port, the "CDN" (``X-Linked-Etag`` its sha256,
  ``X-Linked-Size``), which serves it; both answer ``Range`` requests (206), which is how
  huggingface_hub resumes a download cut short;
- errors as the hub sends them, which huggingface_hub reads by their ``X-Error-Code``: a
  repository it does not have (401 without a token, 404 with one: ``RepoNotFound``), a
  revision (404 ``RevisionNotFound``), a file (404 ``EntryNotFound``); a private repository
  is one it does not have to whoever has no token granted; a gated one lists its info to
  anyone and its files to a token granted (``GatedRepo``: 401 without a token, 403 with one
  not granted).

It never advertises Xet storage (no ``X-Xet-*`` headers), so downloads are plain HTTP.

Faults, for a file of a repository, consumed one per GET of its bytes, the last one kept
until the file is mended: ``"stall"`` (its bytes up to a point of the file, ``at`` of its
size, the middle by default, then nothing until the hub stops), ``"cut"`` (its bytes up to
that point, then the connection closed), ``"unavailable"`` (503 at once), ``None``
(served). Every request is recorded (``requests``), so a test can count what reached the
hub.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")
STALL_MAX_S = 300.0


@dataclass(frozen=True)
class HubFile:
    path: str
    data: bytes

    @property
    def blob(self) -> str:
        return hashlib.sha1(b"blob %d\0" % len(self.data) + self.data).hexdigest()

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def lfs(self) -> bool:
        return self.path.endswith(LFS_SUFFIXES)


@dataclass
class HubRepo:
    repo_id: str
    commits: dict[str, dict[str, HubFile]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    gated: bool = False
    private: bool = False
    tokens: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Seen:
    server: str  # "hub" or "cdn"
    method: str
    path: str
    range: str | None
    token: str | None


def read_directory(directory: Path) -> dict[str, HubFile]:
    files = {}
    for file in sorted(Path(directory).rglob("*")):
        if file.is_file():
            relative = file.relative_to(directory).as_posix()
            files[relative] = HubFile(relative, file.read_bytes())
    return files


class FakeHub:
    def __init__(self) -> None:
        self.repos: dict[str, HubRepo] = {}
        self.requests: list[Seen] = []
        self.faults: dict[tuple[str, str], tuple[list[str | None], float]] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self._servers = [self._serve("hub"), self._serve("cdn")]
        self.url = f"http://127.0.0.1:{self._servers[0].server_address[1]}"
        self.cdn_url = f"http://127.0.0.1:{self._servers[1].server_address[1]}"

    def _serve(self, name: str) -> ThreadingHTTPServer:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.daemon_threads = True
        server.hub, server.name = self, name  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, name=f"fake-{name}", daemon=True).start()
        return server

    def stop(self) -> None:
        self.stopping.set()
        for server in self._servers:
            server.shutdown()
            server.server_close()

    # --- what it serves
    def add(
        self, repo_id: str, revisions: dict[str, Path], *, gated: bool = False, private: bool = False
    ) -> dict[str, str]:
        """``repo_id`` with a branch or tag per entry of ``revisions`` (name -> the directory of
        its files; ``main`` among them); the commit of each."""
        repo = HubRepo(repo_id, gated=gated, private=private)
        for ref, directory in revisions.items():
            files = read_directory(directory)
            listing = "".join(f"{path}\0{file.blob}\n" for path, file in sorted(files.items()))
            commit = hashlib.sha1(f"{repo_id}\0{ref}\0{listing}".encode()).hexdigest()
            repo.commits[commit] = files
            repo.refs[ref] = commit
        with self.lock:
            self.repos[repo_id] = repo
        return dict(repo.refs)

    def files(self, repo_id: str, revision: str = "main") -> dict[str, HubFile]:
        repo = self.repos[repo_id]
        return repo.commits[repo.refs.get(revision, revision)]

    def grant(self, repo_id: str, token: str) -> None:
        with self.lock:
            self.repos[repo_id].tokens.add(token)

    def fault(self, repo_id: str, path: str, *actions: str | None, at: float = 0.5) -> None:
        with self.lock:
            self.faults[(repo_id, path)] = (list(actions), at)

    def mend(self, repo_id: str, path: str) -> None:
        with self.lock:
            self.faults.pop((repo_id, path), None)

    def _next_action(self, repo_id: str, path: str) -> tuple[str | None, float]:
        with self.lock:
            actions, at = self.faults.get((repo_id, path), ([], 0.5))
            if not actions:
                return None, at
            return (actions.pop(0) if len(actions) > 1 else actions[0]), at

    def seen(self, since: int = 0, **match: str) -> list[Seen]:
        """The requests recorded from index ``since``, those whose fields equal ``match``."""
        with self.lock:
            recorded = self.requests[since:]
        return [seen for seen in recorded if all(getattr(seen, k) == v for k, v in match.items())]

    def _record(self, seen: Seen) -> None:
        with self.lock:
            self.requests.append(seen)

    def _by_sha256(self, sha256: str) -> tuple[str, HubFile] | None:
        with self.lock:
            for repo in self.repos.values():
                for files in repo.commits.values():
                    for file in files.values():
                        if file.sha256 == sha256:
                            return repo.repo_id, file
        return None


class _Refusal(Exception):
    def __init__(self, status: int, code: str | None, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-hub"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - BaseHTTPRequestHandler's name
        pass

    @property
    def hub(self) -> FakeHub:
        return self.server.hub  # type: ignore[attr-defined]

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def _token(self) -> str | None:
        scheme, _, value = self.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return None
        return value.strip() or None

    def _answer(self, body: bool) -> None:
        url = urlsplit(self.path)
        segments = [unquote(part) for part in url.path.strip("/").split("/")]
        token = self._token()
        server = self.server.name  # type: ignore[attr-defined]
        self.hub._record(Seen(server, self.command, unquote(url.path), self.headers.get("Range"), token))
        try:
            if server == "cdn":
                self._cdn(segments, body)
            elif segments[:2] == ["api", "models"] and len(segments) >= 4:
                self._api(segments[2:], url.query, token)
            elif len(segments) >= 5 and segments[2] == "resolve":
                self._resolve("/".join(segments[:2]), segments[3], "/".join(segments[4:]), token, body)
            else:
                raise _Refusal(404, None, "not a route of this hub")
        except _Refusal as refusal:
            self._error(refusal)

    # --- the API
    def _repo(self, repo_id: str, token: str | None) -> HubRepo:
        repo = self.hub.repos.get(repo_id)
        if repo is None or (repo.private and token not in repo.tokens):
            raise _Refusal(404 if token else 401, "RepoNotFound", "Repository not found")
        return repo

    def _commit(self, repo: HubRepo, revision: str) -> str:
        commit = repo.refs.get(revision, revision)
        if commit not in repo.commits:
            raise _Refusal(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return commit

    def _api(self, rest: list[str], query: str, token: str | None) -> None:
        repo = self._repo("/".join(rest[:2]), token)
        if len(rest) == 2 or rest[2] == "revision":
            commit = self._commit(repo, rest[3] if len(rest) > 3 else "main")
            self._json(self._info(repo, commit, blobs="blobs=" in query))
        elif rest[2] == "tree" and len(rest) >= 4:
            commit = self._commit(repo, rest[3])
            self._json(self._tree(repo.commits[commit], "/".join(rest[4:]), "recursive=true" in query.lower()))
        else:
            raise _Refusal(404, None, "not a route of this hub")

    def _info(self, repo: HubRepo, commit: str, blobs: bool) -> dict:
        siblings = []
        for file in repo.commits[commit].values():
            sibling: dict = {"rfilename": file.path}
            if blobs:
                sibling.update(size=len(file.data), blobId=file.blob)
                if file.lfs:
                    sibling["lfs"] = {"size": len(file.data), "sha256": file.sha256, "pointerSize": 134}
            siblings.append(sibling)
        org = repo.repo_id.partition("/")[0]
        return {
            "_id": commit[:24], "id": repo.repo_id, "modelId": repo.repo_id, "author": org, "sha": commit,
            "lastModified": "2026-01-01T00:00:00.000Z", "private": repo.private,
            "gated": "manual" if repo.gated else False, "disabled": False, "tags": [], "siblings": siblings,
        }

    def _tree(self, files: dict[str, HubFile], under: str, recursive: bool) -> list[dict]:
        prefix = f"{under}/" if under else ""
        entries: dict[str, dict] = {}
        for file in files.values():
            if not file.path.startswith(prefix):
                continue
            parts = file.path[len(prefix):].split("/")
            for depth in range(1, len(parts)):
                folder = prefix + "/".join(parts[:depth])
                if recursive or depth == 1:
                    entries.setdefault(folder, {"type": "directory", "path": folder, "oid": "0" * 40})
            if recursive or len(parts) == 1:
                entry = {"type": "file", "path": file.path, "size": len(file.data), "oid": file.blob}
                if file.lfs:
                    entry["lfs"] = {"oid": file.sha256, "size": len(file.data), "pointerSize": 134}
                entries[file.path] = entry
        return [entries[path] for path in sorted(entries)]

    # --- files
    def _resolve(self, repo_id: str, revision: str, path: str, token: str | None, body: bool) -> None:
        repo = self._repo(repo_id, token)
        if repo.gated and token not in repo.tokens:
            raise _Refusal(
                403 if token else 401, "GatedRepo",
                f"Access to model {repo_id} is restricted. You must have access to it and be authenticated "
                "to access it.",
            )
        commit = self._commit(repo, revision)
        file = repo.commits[commit].get(path)
        if file is None:
            raise _Refusal(404, "EntryNotFound", f"{path} does not exist on \"{revision}\"", {"X-Repo-Commit": commit})
        headers = {"X-Repo-Commit": commit, "ETag": f'"{file.blob}"'}
        if file.lfs:
            headers.update({
                "Location": f"{self.hub.cdn_url}/lfs/{file.sha256}", "X-Linked-Etag": f'"{file.sha256}"',
                "X-Linked-Size": str(len(file.data)), "Content-Length": "0",
            })
            self._head(302, headers)
            return
        self._file(repo_id, file, headers, body)

    def _cdn(self, segments: list[str], body: bool) -> None:
        found = self.hub._by_sha256(segments[-1]) if segments[:1] == ["lfs"] else None
        if found is None:
            raise _Refusal(404, None, "no such object")
        repo_id, file = found
        self._file(repo_id, file, {"ETag": f'"{file.sha256}"'}, body)

    def _file(self, repo_id: str, file: HubFile, headers: dict[str, str], body: bool) -> None:
        size, start = len(file.data), 0
        requested = self.headers.get("Range", "")
        if requested.startswith("bytes="):
            first, _, _ = requested[len("bytes="):].partition("-")
            start = int(first or 0)
            if start >= size:
                raise _Refusal(416, None, "range not satisfiable", {"Content-Range": f"bytes */{size}"})
        action, at = self.hub._next_action(repo_id, file.path) if body else (None, 0.5)
        if action == "unavailable":
            raise _Refusal(503, None, "the hub is unavailable")
        status = 206 if start else 200
        headers = {**headers, "Content-Length": str(size - start), "Accept-Ranges": "bytes",
                   "Content-Type": "application/octet-stream"}
        if start:
            headers["Content-Range"] = f"bytes {start}-{size - 1}/{size}"
        self._head(status, headers)
        if not body:
            return
        if action in ("stall", "cut"):
            self.wfile.write(file.data[start:max(start, int(size * at))])
            self.wfile.flush()
            if action == "stall":
                self.hub.stopping.wait(STALL_MAX_S)
            self._drop()
            return
        self.wfile.write(file.data[start:])

    # --- answers
    def _head(self, status: int, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()

    def _json(self, value: object) -> None:
        data = json.dumps(value).encode()
        self._head(200, {"Content-Type": "application/json", "Content-Length": str(len(data))})
        if self.command != "HEAD":
            self.wfile.write(data)

    def _error(self, refusal: _Refusal) -> None:
        data = json.dumps({"error": refusal.message}).encode()
        headers = {"Content-Type": "application/json", "Content-Length": str(len(data)),
                   "X-Error-Message": refusal.message, **refusal.headers}
        if refusal.code:
            headers["X-Error-Code"] = refusal.code
        self._head(refusal.status, headers)
        if self.command != "HEAD":
            self.wfile.write(data)

    def _drop(self) -> None:
        """The connection closed under the client, mid-answer."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
