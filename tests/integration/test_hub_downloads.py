"""Models loaded by name from a hub, and what a load answers when the hub says no or fails:
the fake hub on 127.0.0.1 (``tests/hub_server.py``) serves tiny models under hub names, the
gateway downloads them (``converters/hub/``), converts them and serves them through the real
tritonserver, each held to its library (sentence-transformers' ``encode``,
``CrossEncoder.predict``, open_clip).

- the download shows in the load's progress, in the command line and in the stream of
  events; the revision is recorded; a model the hub cache holds whole is converted again
  without a request to the hub;
- a model or revision the hub does not have is a 404, a gated model the server's token has
  no access to a 403 naming HF_TOKEN (and served once it has), a download that stalls a 504
  and one cut for good a 502, which leave nothing half-written in the hub cache nor in the
  repository, and whose next load downloads only what is missing. No answer carries a path
  of the server or an exception's text. (Downloads off, the default: a 403 naming the
  setting, in ``test_cli.py`` and ``test_sentence_transformer.py``, on the session's gateway.)
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from embedgate.converters.hub.progress import size_text
from tests import hub_models, tiny_models
from tests.helpers import cosine_rows
from tests.hub_server import FakeHub

from .hub_gateway import HUB_TOKEN, start_hub_gateway

ST = "hubtest/tiny-st"
RERANKER = "hubtest/tiny-reranker"
CLIP_REPO = "hubtest/tiny-clip"
CLIP = {"model_name": "tiny-clip-hub", "pretrained": f"hf-hub:{CLIP_REPO}"}
GATED = "hubtest/gated"
PRIVATE = "hubtest/private"
FLAKY = "hubtest/flaky"
WEIGHTS = "model.safetensors"
STEP = re.compile(r"^\[\s*\d+\.\ds\] (?P<message>.+)$")


@pytest.fixture(scope="module")
def directories(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("hub-models")
    dense = {name: tiny_models.dense_model(root / name.replace("/", "-").replace("@", "-"), seed=seed)
             for name, seed in ((ST, 41), (f"{ST}@v1", 42), (GATED, 51), (PRIVATE, 52), (FLAKY, 53))}
    return {
        **dense,
        RERANKER: tiny_models.cross_encoder(root / "reranker", seed=43),
        CLIP_REPO: hub_models.open_clip_repository(root / "clip", seed=44),
    }


@pytest.fixture(scope="module")
def fake_hub():
    hub = FakeHub()
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def commits(fake_hub, directories) -> dict:
    return {
        ST: fake_hub.add(ST, {"main": directories[ST], "v1": directories[f"{ST}@v1"]}),
        RERANKER: fake_hub.add(RERANKER, {"main": directories[RERANKER]}),
        CLIP_REPO: fake_hub.add(CLIP_REPO, {"main": directories[CLIP_REPO]}),
        GATED: fake_hub.add(GATED, {"main": directories[GATED]}, gated=True),
        PRIVATE: fake_hub.add(PRIVATE, {"main": directories[PRIVATE]}, private=True),
        FLAKY: fake_hub.add(FLAKY, {"main": directories[FLAKY]}),
    }


@pytest.fixture(scope="module")
def hub_gateway(tmp_path_factory, fake_hub, commits):
    """The gateway that downloads from the fake hub, with a token, and huggingface_hub's read
    timeout at its least (a second: a stalled download fails after its retries in seconds)."""
    served = start_hub_gateway(tmp_path_factory, fake_hub, "hub-gateway", token=HUB_TOKEN, HF_HUB_DOWNLOAD_TIMEOUT="1")
    yield served
    served.gateway.stop()


@pytest.fixture
def http(hub_gateway):
    with hub_gateway.gateway.client() as client:
        yield client


def embedgate(gateway, *argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, EMBEDGATE_URL=gateway.url)
    return subprocess.run([sys.executable, "-m", "embedgate.api", *argv], env=env, capture_output=True, text=True,
                          timeout=900)


def download_total(hub, repo_id: str, revision: str = "main") -> tuple[int, int]:
    """The files and bytes a load downloads of the repository: all of them (none hidden, no
    format left out)."""
    files = hub.files(repo_id, revision)
    return len(files), sum(len(file.data) for file in files.values())


@pytest.fixture(scope="module")
def st_loaded(hub_gateway):
    """The sentence-transformer loaded by name with ``embedgate load``."""
    return embedgate(hub_gateway.gateway, "load", ST)


def test_a_sentence_transformer_by_name_shows_its_download_in_the_cli(
    hub_gateway, st_loaded, http, commits, directories
):
    from sentence_transformers import SentenceTransformer

    assert st_loaded.returncode == 0, st_loaded.stderr
    result = json.loads(st_loaded.stdout)
    assert result["converted"] is True
    assert result["made_from"]["type"] == "hub" and result["made_from"]["location"] == ST
    assert result["made_from"]["revision"] == commits[ST]["main"]

    # The download's steps: files and bytes done of those needed, up to all of them, before the conversion.
    messages = [STEP.match(line)["message"] for line in st_loaded.stderr.splitlines()]
    downloads = [m for m in messages if m.startswith(("downloading ", "downloaded "))]
    files, size = download_total(hub_gateway.hub, ST)
    assert downloads[0] == f"downloading {ST}: 0 of {files} files, 0 B of {size_text(size)}"
    assert downloads[-1] == f"downloaded {ST}: {files} of {files} files, {size_text(size)} of {size_text(size)}"
    assert len(downloads) > files  # one as each file ends, at least
    assert messages.index(downloads[-1]) < next(i for i, m in enumerate(messages) if m.startswith("exporting ONNX"))

    texts = ["hub downloads: the first text", "hub downloads: another one"]
    response = http.post("/infer", json={"model_name": ST, "text": texts})
    assert response.status_code == 200 and response.headers["x-cached-inputs"] == "0", response.text
    library = SentenceTransformer(str(directories[ST]), device="cpu")
    assert cosine_rows(response.json()["text_embeddings"], library.encode(texts)).min() >= 0.9999
    listed = {m["model_name"]: m for m in http.get("/loaded_models").json()["models"]}
    assert listed[ST]["made_from"]["revision"] == commits[ST]["main"]


def test_a_cross_encoder_by_name_streams_its_download(hub_gateway, http, commits, directories):
    from sentence_transformers import CrossEncoder

    with http.stream("POST", "/load_sentence_transformer_model", json={"model_name": RERANKER},
                     headers={"accept": "application/x-ndjson"}) as response:
        events = [json.loads(line) for line in response.iter_lines() if line.strip()]
    assert events[-1]["event"] == "done", events[-1]
    assert events[-1]["result"]["kind"] == "cross_encoder" and events[-1]["result"]["converted"] is True
    downloads = [e["download"] for e in events if "download" in e]
    files, size = download_total(hub_gateway.hub, RERANKER)
    assert {(d["repo"], d["revision"], d["files_total"], d["bytes_total"]) for d in downloads} == {
        (RERANKER, commits[RERANKER]["main"], files, size)
    }
    done = [(d["files_done"], d["bytes_done"]) for d in downloads]
    assert done == sorted(done) and done[0] == (0, 0) and done[-1] == (files, size)

    query, documents = "hub: what does the fox do", ["the quick brown fox jumps", "stocks fell", "a man is eating food"]
    answer = http.post("/rerank", json={"model": RERANKER, "query": query, "documents": documents})
    assert answer.status_code == 200, answer.text
    expected = CrossEncoder(str(directories[RERANKER]), device="cpu").predict([(query, d) for d in documents])
    results = answer.json()["results"]
    scores = [r["relevance_score"] for r in results]
    np.testing.assert_allclose(scores, expected[[r["index"] for r in results]], atol=1e-4)


def picture(width: int, height: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    image = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def test_an_open_clip_model_from_a_hub_repository_resumes_a_cut_download(hub_gateway, http, commits, directories):
    import torch

    from huggingface_hub import constants

    hub, weights = hub_gateway.hub, "open_clip_pytorch_model.bin"
    size, chunk = len(hub.files(CLIP_REPO)[weights].data), constants.DOWNLOAD_CHUNK_SIZE
    # The connection cut once, past the first chunk huggingface_hub writes as it comes: it asks for the rest.
    assert size > chunk
    hub.fault(CLIP_REPO, weights, "cut", None, at=(chunk + size) / 2 / size)
    since = len(hub.requests)
    response = http.post("/load_clip_model", json=CLIP)
    assert response.status_code == 200, response.text
    assert response.json()["made_from"]["location"] == CLIP_REPO
    assert response.json()["made_from"]["revision"] == commits[CLIP_REPO]["main"]
    fetched = [seen.range for seen in hub.seen(since, server="cdn", method="GET")]
    assert fetched[0] is None and len(fetched) == 2
    resumed_at = int(re.fullmatch(r"bytes=(\d+)-", fetched[1])[1])
    assert 0 < resumed_at < size

    model, preprocess, tokenizer = hub_models.open_clip_reference(directories[CLIP_REPO])
    texts, images = ["a photo from the hub", "a diagram of a cat"], [picture(80, 50, 1), picture(40, 90, 2)]
    served = http.post("/infer", json={**CLIP, "text": texts, "image": images})
    assert served.status_code == 200, served.text
    with torch.no_grad():
        text_reference = model.encode_text(tokenizer(texts)).numpy()
        decoded = [Image.open(io.BytesIO(base64.b64decode(uri.split(",")[1]))) for uri in images]
        pixels = torch.stack([preprocess(image) for image in decoded])
        image_reference = model.encode_image(pixels).numpy()
    assert cosine_rows(served.json()["text_embeddings"], text_reference).min() >= 0.9999
    assert cosine_rows(served.json()["image_embeddings"], image_reference).min() >= 0.9999


def test_a_second_load_asks_nothing_of_the_hub(hub_gateway, st_loaded, http, directories):
    from sentence_transformers import SentenceTransformer

    hub, texts = hub_gateway.hub, ["hub downloads: from the cache"]
    since = len(hub.requests)
    assert http.post("/unload_model", json={"model_name": ST}).status_code == 200
    again = http.post("/load_sentence_transformer_model", json={"model_name": ST})
    assert again.status_code == 200 and again.json()["converted"] is False, again.text
    # Taken out of the repository too: converted again, from the hub cache's copy.
    assert http.post("/delete_model", json={"model_name": ST}).status_code == 200
    converted = http.post("/load_sentence_transformer_model", json={"model_name": ST})
    assert converted.status_code == 200 and converted.json()["converted"] is True, converted.text
    assert hub.seen(since) == []
    served = http.post("/infer", json={"model_name": ST, "text": texts}).json()["text_embeddings"]
    library = SentenceTransformer(str(directories[ST]), device="cpu")
    assert cosine_rows(served, library.encode(texts)).min() >= 0.9999


def test_a_pinned_revision_is_served_and_recorded(hub_gateway, st_loaded, http, commits, directories):
    from sentence_transformers import SentenceTransformer

    pinned = {"model_name": ST, "revision": "v1"}
    response = http.post("/load_sentence_transformer_model", json=pinned)
    assert response.status_code == 200 and response.json()["converted"] is True, response.text
    assert response.json()["made_from"]["revision"] == commits[ST]["v1"] != commits[ST]["main"]
    listed = {m["model_name"]: m for m in http.get("/loaded_models").json()["models"]}
    assert listed[ST]["made_from"]["revision"] == commits[ST]["v1"]

    texts = ["hub downloads: the revision's own weights", "and another text"]
    served = http.post("/infer", json={"model_name": ST, "text": texts}).json()["text_embeddings"]
    v1 = SentenceTransformer(str(directories[f"{ST}@v1"]), device="cpu").encode(texts)
    main = SentenceTransformer(str(directories[ST]), device="cpu").encode(texts)
    assert cosine_rows(served, v1).min() >= 0.9999 and cosine_rows(served, main).max() < 0.99
    # The same revision again: the repository's copy, as it is.
    again = http.post("/load_sentence_transformer_model", json=pinned)
    assert again.json()["status"] == "already_loaded" and again.json()["converted"] is False


def refused(response, status: int, code: str) -> str:
    """The error's message, once its status and code are as expected and it tells nothing of
    the server's insides."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code, error
    for inside in ("/tmp", "/work", "snapshots", "Traceback", "Error", "Exception", "127.0.0.1"):
        assert inside not in error["message"], error["message"]
    return error["message"]


def load(http, name: str, **fields):
    return http.post("/load_sentence_transformer_model", json={"model_name": name, **fields})


def assert_served_as_the_library(http, name: str, directory, texts: list[str]) -> None:
    from sentence_transformers import SentenceTransformer

    response = http.post("/infer", json={"model_name": name, "text": texts})
    assert response.status_code == 200 and response.headers["x-cached-inputs"] == "0", response.text
    expected = SentenceTransformer(str(directory), device="cpu").encode(texts)
    assert cosine_rows(response.json()["text_embeddings"], expected).min() >= 0.9999


def test_a_model_or_revision_the_hub_does_not_have_is_404(http):
    message = refused(load(http, "hubtest/nowhere"), 404, "model_not_found")
    assert "the hub has no model 'hubtest/nowhere'" in message
    message = refused(load(http, FLAKY, revision="no-such-branch"), 404, "model_not_found")
    assert f"the hub has no revision 'no-such-branch' of model '{FLAKY}'" in message
    # A private model the token cannot see is one the hub does not have, as the hub says it.
    message = refused(load(http, PRIVATE), 404, "model_not_found")
    assert "private" in message and "HF_TOKEN" in message


def test_a_gated_model_names_hf_token_and_is_served_once_the_token_has_access(hub_gateway, http, directories):
    message = refused(load(http, GATED), 403, "hub_access_denied")
    assert f"'{GATED}' is gated" in message and "HF_TOKEN" in message
    hub_gateway.hub.grant(GATED, HUB_TOKEN)
    response = load(http, GATED)
    assert response.status_code == 200 and response.json()["converted"] is True, response.text
    assert_served_as_the_library(http, GATED, directories[GATED], ["a gated model, served"])


def test_a_download_that_stalls_or_is_cut_leaves_nothing_half_written_and_the_next_load_completes(
    hub_gateway, http, commits, directories
):
    hub, commit = hub_gateway.hub, commits[FLAKY]["main"]
    snapshot, files = hub_gateway.snapshot(FLAKY, commit), sorted(hub.files(FLAKY))
    repository = hub_gateway.gateway.repository

    def nothing_half_written(whole: set[str]) -> None:
        present = {path.relative_to(snapshot).as_posix() for path in snapshot.rglob("*") if path.is_file()}
        assert present == whole
        assert not [blob.name for blob in hub_gateway.blobs(FLAKY) if blob.name.endswith(".incomplete")]
        assert not [entry.name for entry in repository.iterdir() if FLAKY.split("/")[1] in entry.name]
        staging = repository / ".staging"
        assert not staging.exists() or not any(staging.iterdir())

    # The weights stall halfway: huggingface_hub waits its timeout, tries again, gives up.
    hub.fault(FLAKY, WEIGHTS, "stall")
    message = refused(load(http, FLAKY), 504, "hub_timeout")
    assert f"'{WEIGHTS}' of '{FLAKY}'" in message and "next load" in message
    nothing_half_written({name for name in files if name < WEIGHTS})

    # Then the tokenizer's connection is cut halfway, and the hub fails the try again.
    hub.mend(FLAKY, WEIGHTS)
    hub.fault(FLAKY, "tokenizer.json", "cut", "unavailable")
    message = refused(load(http, FLAKY), 502, "hub_unavailable")
    assert "'tokenizer.json'" in message and "503" in message
    nothing_half_written({name for name in files if name < "tokenizer.json"})

    # The hub whole again: only what is missing is downloaded, and the model is served.
    hub.mend(FLAKY, "tokenizer.json")
    since = len(hub.requests)
    response = load(http, FLAKY)
    assert response.status_code == 200 and response.json()["converted"] is True, response.text
    fetched = {seen.path.rsplit(f"{commit}/", 1)[-1] for seen in hub.seen(since, server="hub", method="GET")
               if "/resolve/" in seen.path}
    assert fetched == {name for name in files if name >= "tokenizer.json"}
    assert_served_as_the_library(http, FLAKY, directories[FLAKY], ["served after the hub came back"])
