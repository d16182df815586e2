"""Models in memory, on the real gateway and tritonserver (docs/memory.md): loads on a
model's first request, a memory budget that holds two of three tiny models, keep-alive and
pinning. Every answer is compared with the library's own vectors.

Two dense sentence-transformers (A, B: one Triton model each) and an OpenCLIP model (C: a
text and an image tower) are converted once by the session gateway, which measures them;
they are copied into this module's repository and served there by one gateway of two
workers (whose primary decides for both) with a budget that holds any two of them, never
three. A request for C with an image that the test's image server holds back is a request
in flight for as long as the test wants. TEI's base URLs, which name their model in the
path, and bulk jobs load their model as every other request does.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import json
import shutil
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from tests import tiny_models
from tests.clip_model import build_tiny_clip, reference_model
from tests.helpers import cosine_rows
from tests.image_server import ImageServer

from .conftest import model_stubs, start_gateway, wait_ready, wait_until
from .worker_clients import WORKER, WORKERS, connections

A, B = "tiny/memory-a", "tiny/memory-b"
MIB = 1024 * 1024
LOAD_HEADER = "x-model-load-time-ms"
# The image host the gateway may fetch from (127.0.0.1 it never may).
IMAGE_HOST = "127.0.0.2"


def png(seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 255, size=(40, 56, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


class Library:
    """The library's own vectors for each model (normalized, as the APIs answer)."""

    def __init__(self, dense: dict[str, object], clip):
        self.dense = dense
        self.clip = clip

    def texts(self, model: str, texts: list[str]) -> np.ndarray:
        if model in self.dense:
            return self.dense[model].encode(texts, normalize_embeddings=True)
        import torch

        clip_model, _, tokenizer = self.clip
        with torch.no_grad():
            vectors = clip_model.encode_text(tokenizer(texts)).numpy()
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    def images(self, blobs: list[bytes]) -> np.ndarray:
        import torch

        clip_model, preprocess, _ = self.clip
        with torch.no_grad():
            batch = torch.stack([preprocess(Image.open(io.BytesIO(blob))) for blob in blobs])
            vectors = clip_model.encode_image(batch).numpy()
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def assert_parity(served, expected) -> None:
    assert cosine_rows(served, expected).min() >= 0.9999
    np.testing.assert_allclose(served, expected, atol=1e-4)


class Served:
    """This module's gateway, the models it serves (by key: what requests name) and the
    library's twins of them."""

    def __init__(self, gateway, library: Library, bodies: dict[str, dict], triton_names: dict[str, list[str]], images):
        self.gateway = gateway
        self.library = library
        self.bodies = bodies  # how a request names each model
        self.triton_names = triton_names
        self.images = images
        self.http = gateway.client(timeout=120)
        self.texts = 0

    def text(self, model: str) -> str:
        self.texts += 1
        return f"{tiny_models.WORDS[self.texts % len(tiny_models.WORDS)]} {model} request {self.texts}"

    def infer(self, model: str, text: str | None = None, **headers: str) -> httpx.Response:
        text = text or self.text(model)
        answer = self.http.post("/infer", json={**self.bodies[model], "text": [text]}, headers=headers)
        if answer.status_code == 200:
            assert_parity(answer.json()["text_embeddings"], self.library.texts(model, [text]))
        return answer

    def loaded(self) -> dict[str, dict]:
        """The loaded models, by the key requests name them by."""
        keys = {body.get("pretrained", body["model_name"]): key for key, body in self.bodies.items()}
        listed = self.http.get("/loaded_models").json()["models"]
        return {keys[m.get("pretrained") or m["model_name"]]: m for m in listed}

    def triton_pid(self) -> int:
        return self.gateway.children("tritonserver")[0]

    def stubs(self, model: str) -> list[int]:
        return [pid for part in self.triton_names[model] for pid in model_stubs(self.triton_pid(), part)]


def resident(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


@pytest.fixture(scope="module")
def converted(gateway, clip_configs, tmp_path_factory):
    """The three models converted by the session gateway, each answered once there and
    measured; copied into a repository of this module's own, then deleted from the session's
    (other tests count its models). Yields the repository, the library's models, how a
    request names each model, their Triton models and their memory there."""
    from sentence_transformers import SentenceTransformer

    sources = tmp_path_factory.mktemp("memory-models")
    repository = tmp_path_factory.mktemp("memory-repository")
    tiny_clip = build_tiny_clip(sources / "clip", seed=7, config_dir=clip_configs)
    clip_key = f"{tiny_clip.model_name}:{tiny_clip.checkpoint}"
    bodies = {
        A: {"model_name": A}, B: {"model_name": B},
        clip_key: {"model_name": tiny_clip.model_name, "pretrained": str(tiny_clip.checkpoint)},
    }
    dense, loads = {}, {}
    for seed, name in enumerate((A, B), start=31):
        directory = tiny_models.dense_model(sources / name.replace("/", "-"), seed=seed)
        dense[name] = SentenceTransformer(str(directory), device="cpu")
        loads[name] = ("/load_sentence_transformer_model", {"model_name": name, "model_path": str(directory)})
    loads[clip_key] = ("/load_clip_model", bodies[clip_key])

    def convert(key: str) -> None:
        with gateway.client(timeout=600) as http:
            loaded = http.post(*loads[key][:1], json=loads[key][1])
            assert loaded.status_code == 200, loaded.text
            assert http.post("/infer", json={**bodies[key], "text": ["warm it"]}).status_code == 200

    def delete(key: str) -> None:
        with gateway.client(timeout=600) as http:
            assert http.post("/delete_model", json=bodies[key]).status_code == 200

    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        list(pool.map(convert, bodies))  # side by side: the warm converter forks each
        with gateway.client() as http:
            listed = {m.get("pretrained") or m["model_name"]: m for m in http.get("/loaded_models").json()["models"]}
        triton_names, held = {}, {}
        for key, body in bodies.items():
            model = listed[body.get("pretrained", body["model_name"])]
            triton_names[key], held[key] = model["triton_parts"], model["memory_bytes"]
            for part in model["triton_parts"]:
                shutil.copytree(gateway.repository / part, repository / part)
        list(pool.map(delete, bodies))
    return repository, Library(dense, reference_model(tiny_clip)), bodies, triton_names, held


@pytest.fixture(scope="module")
def images():
    server = ImageServer(IMAGE_HOST)
    yield server
    server.close()


@pytest.fixture(scope="module")
def served(converted, clip_configs, images, tmp_path_factory):
    repository, library, bodies, triton_names, held = converted
    # Any two fit, the three do not: all three less half the smallest.
    budget_mb = (sum(held.values()) - min(held.values()) / 2) / MIB
    gateway = start_gateway(
        repository, tmp_path_factory.mktemp("memory-logs") / "gateway.log",
        load_on_first_request="true", memory_budget_mb=f"{budget_mb:.1f}", clip_model_config_dir=str(clip_configs),
        image_fetch_allow=IMAGE_HOST, image_fetch_timeout_s="120", workers=str(WORKERS),
    )
    wait_ready(gateway)
    serving = Served(gateway, library, bodies, triton_names, images)
    try:
        yield serving
    finally:
        serving.http.close()
        gateway.stop()


@pytest.fixture(scope="module")
def C(served) -> str:  # noqa: N802 - the third model, as A and B
    return next(key for key in served.bodies if key not in (A, B))


def first_request_loads(served: Served, model: str, after: int) -> int:
    return served.gateway.log()[after:].count(f"model {model} loaded on its first request")


def test_a_model_not_in_the_repository_is_never_converted(served):
    start = len(served.gateway.log())
    answer = served.http.post("/infer", json={"model_name": "tiny/never-converted", "text": ["anything"]})
    assert answer.status_code == 404, answer.text
    assert answer.json()["error"]["code"] == "model_not_found"
    assert "convert" not in served.gateway.log()[start:]


def test_concurrent_first_requests_wait_for_one_load(served):
    """Requests for a model not loaded, side by side on both gateway workers: the primary
    loads it once for all of them, and every one is answered at parity."""
    assert A not in served.loaded()
    start = len(served.gateway.log())
    texts = [served.text(A) for _ in range(6)]
    answers: list[httpx.Response | None] = [None] * len(texts)
    pinned = connections(served.gateway.url, timeout=120)  # the first two, one on each worker

    def send(i: int) -> None:
        # Half through OpenAI's API: every API's requests load the model the same way.
        with contextlib.nullcontext(pinned[i]) if i in pinned else served.gateway.client(timeout=120) as http:
            if i % 2:
                answers[i] = http.post("/v1/embeddings", json={"model": A, "input": [texts[i]]})
            else:
                answers[i] = http.post("/infer", json={"model_name": A, "text": [texts[i]]})

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(texts))]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for client in pinned.values():
            client.close()
    for i, answer in enumerate(answers):
        assert answer is not None and answer.status_code == 200, answer and answer.text
        body = answer.json()
        vectors = [row["embedding"] for row in body["data"]] if i % 2 else body["text_embeddings"]
        assert_parity(vectors, served.library.texts(A, [texts[i]]))
    assert {answers[i].headers[WORKER] for i in pinned} == {"0", "1"}
    # One load, by the primary; each worker that had requests waiting says it waited for it.
    assert served.gateway.log()[start:].count(f"model {A} loaded (triton") == 1
    assert 1 <= first_request_loads(served, A, start) <= WORKERS
    # The one that started the load waited for it, and says so.
    assert any(float(answer.headers.get(LOAD_HEADER, 0)) > 0 for answer in answers if answer is not None)


def assert_memory_is_its_stubs(served: Served, model: str, stubs: int) -> None:
    """/loaded_models and the metrics say what /proc says the model's stubs hold, within 20%."""
    pids = served.stubs(model)
    assert len(pids) == stubs
    measured = sum(resident(pid) for pid in pids)
    listed = served.loaded()[model]["memory_bytes"]
    assert abs(listed - measured) <= 0.2 * measured, (listed, measured)
    metric = served.gateway.metric("embedgate_model_memory_bytes", model=model, memory="host")
    assert abs(metric - measured) <= 0.2 * measured, (metric, measured)


def test_a_models_memory_is_its_stubs_resident_memory(served):
    assert served.infer(A).status_code == 200
    assert_memory_is_its_stubs(served, A, 1)


def test_the_least_recently_used_idle_model_makes_room(served, C):
    assert served.infer(B).status_code == 200  # A and B fit
    assert served.infer(A).status_code == 200  # B is now the least recently used
    start = len(served.gateway.log())
    assert served.infer(C).status_code == 200
    served.gateway.wait_log(f"model {B} unloaded (budget)", after=start)
    assert set(served.loaded()) == {A, C}
    assert served.gateway.metric("embedgate_model_unloads_total", model=B, reason="budget") >= 1
    assert served.infer(A).status_code == 200 and served.infer(C).status_code == 200
    assert_memory_is_its_stubs(served, C, 2)  # its text and image towers


def test_a_model_with_a_request_in_flight_is_never_unloaded(served, C):
    assert served.infer(A).status_code == 200
    assert set(served.loaded()) == {A, C}
    # C is the least recently used; a request for it held in flight (its image held back).
    release = threading.Event()
    image = png(5)
    url = served.images.add("/held.png", image, headers={"Content-Type": "image/png"}, hold=release)
    answer: list[httpx.Response] = []

    def held_request() -> None:
        with served.gateway.client(timeout=120) as http:
            answer.append(http.post("/infer", json={**served.bodies[C], "image": [url]}))

    held = threading.Thread(target=held_request)
    held.start()
    try:
        wait_until(lambda: "/held.png" in served.images.requests, 60, "C's request fetching its image")
        start = len(served.gateway.log())
        assert served.infer(B).status_code == 200  # A made room, not C
        served.gateway.wait_log(f"model {A} unloaded (budget)", after=start)
        assert set(served.loaded()) == {B, C}
        # B pinned, C in use: nothing idle frees enough for A.
        pinned = served.http.post("/load_sentence_transformer_model", json={"model_name": B, "pinned": True})
        assert pinned.status_code == 200 and pinned.json()["status"] == "already_loaded", pinned.text
        assert served.loaded()[B]["pinned"] is True
        refused = served.infer(A)
        assert refused.status_code == 507, refused.text
        message = refused.json()["error"]["message"]
        assert "EMBEDGATE_MEMORY_BUDGET_MB" in message and f"{B}" in message and "pinned" in message
        assert "in use" in message
    finally:
        release.set()
        held.join()
    assert answer[0].status_code == 200, answer[0].text
    assert_parity(answer[0].json()["image_embeddings"], served.library.images([image]))
    assert set(served.loaded()) == {B, C}
    # C idle again: it makes room for A (B stays, pinned).
    assert served.infer(A).status_code == 200
    assert set(served.loaded()) == {A, B}


def test_a_deadline_shorter_than_the_load(served, C):
    assert C not in served.loaded()
    start = len(served.gateway.log())
    late = served.infer(C, **{"x-request-timeout": "0.001"})
    assert late.status_code == 504, late.text
    assert "still loading" in late.json()["error"]["message"]
    served.gateway.wait_log(f"model {C} loaded on its first request", after=start)
    answer = served.infer(C)
    assert answer.status_code == 200 and LOAD_HEADER not in answer.headers
    assert first_request_loads(served, C, start) == 1
    assert set(served.loaded()) == {B, C}  # A made room (B is pinned)


def test_an_idle_model_is_unloaded_after_its_keep_alive(served, C):
    start = len(served.gateway.log())
    # C is loaded (it serves for ever, as the server's keep-alive says): a load that says
    # its own keep-alive changes it.
    loaded = served.http.post("/load_clip_model", json={**served.bodies[C], "keep_alive": 0.2})
    assert loaded.status_code == 200 and loaded.json()["status"] == "already_loaded", loaded.text
    served.gateway.wait_log(f"model {C} unloaded (idle)", after=start)
    assert set(served.loaded()) == {B}  # B keeps the server's keep-alive: for ever
    assert served.gateway.metric("embedgate_model_unloads_total", model=C, reason="idle") >= 1
    assert served.infer(C).status_code == 200  # loaded again on its next request


def unload(served: Served, model: str) -> None:
    answer = served.http.post("/unload_model", json=served.bodies[model])
    assert answer.status_code == 200, answer.text
    assert model not in served.loaded()


def test_a_tei_base_url_loads_its_model_for_each_of_its_routes(served):
    """TEI's URLs name their model in the path: each route of ``/tei/<model>`` that needs the
    model loads it (the base URL reads its kind first); ``/health`` says it is served without
    loading it."""
    if A in served.loaded():
        unload(served, A)
    assert served.http.get(f"/tei/{A}/health").status_code == 200
    assert A not in served.loaded()
    text = served.text(A)
    embedded = served.http.post(f"/tei/{A}/embed", json={"inputs": [text]})
    assert embedded.status_code == 200, embedded.text
    assert float(embedded.headers[LOAD_HEADER]) > 0
    assert_parity(embedded.json(), served.library.texts(A, [text]))

    unload(served, A)
    text = served.text(A)
    at_base_url = served.http.post(f"/tei/{A}", json={"inputs": text})
    assert at_base_url.status_code == 200, at_base_url.text
    assert LOAD_HEADER in at_base_url.headers
    assert_parity(at_base_url.json(), served.library.texts(A, [text]))

    unload(served, A)
    tokens = served.http.post(f"/tei/{A}/tokenize", json={"inputs": "hello world"})
    assert tokens.status_code == 200, tokens.text
    assert LOAD_HEADER in tokens.headers
    tokenizer = served.library.dense[A].tokenizer
    assert [token["id"] for token in tokens.json()[0]] == tokenizer("hello world")["input_ids"]

    unload(served, A)
    info = served.http.get(f"/tei/{A}/info")
    assert info.status_code == 200, info.text
    assert info.json()["model_id"] == A and A in served.loaded()


def test_a_bulk_job_loads_its_model(served):
    """A batch whose model is in the repository but not loaded loads it for its chunks: every
    line answered with the library's vector."""
    import openai

    if A in served.loaded():
        unload(served, A)
    texts = [served.text(A) for _ in range(40)]
    lines = [
        json.dumps({"custom_id": f"line-{i}", "method": "POST", "url": "/v1/embeddings",
                    "body": {"model": A, "input": text}})
        for i, text in enumerate(texts)
    ]
    with openai.OpenAI(api_key="x", base_url=f"{served.gateway.url}/v1", timeout=120) as client:
        uploaded = client.files.create(file=("memory.jsonl", io.BytesIO("\n".join(lines).encode())), purpose="batch")
        batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h")
        batch = wait_until(
            lambda: (b := client.batches.retrieve(batch.id)).status in ("completed", "failed", "expired") and b,
            120, "the batch to finish", 0.2,
        )
        assert batch.status == "completed" and batch.request_counts.completed == len(texts), (
            batch.status, batch.request_counts, batch.errors)
        rows = sorted((json.loads(row) for row in client.files.content(batch.output_file_id).text.splitlines()),
                      key=lambda row: int(row["custom_id"].split("-")[1]))
    vectors = [row["response"]["body"]["data"][0]["embedding"] for row in rows]
    assert_parity(vectors, served.library.texts(A, texts))
    assert A in served.loaded()
