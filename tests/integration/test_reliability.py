"""Overload, deadlines, disconnects, faults, bad input and keys, on real gateways with
tight limits: ``strict`` (its own repository, so its Triton queue limit is written into the
model) and ``small`` (the session's repository, with a tiny in-flight limit, a default
deadline of one second and conversions cut after one second)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from embedgate.api.compute.scheduling.batching import BatchingPolicy
from embedgate.api.settings import Settings
from embedgate.contract.spec import EMBEDDING
from embedgate.converters import triton_config
from tests.helpers import cosine_rows
from tests.run_shared import SERVED, link_or_copy

from .conftest import MINILM, MINILM_TRITON_NAME, processes, start_gateway, wait_ready, wait_until_async

USER = {"authorization": "Bearer user-key"}
ADMIN = {"authorization": "Bearer admin-key"}
LIMITS = dict(
    api_keys="user-key",
    admin_keys="admin-key",
    max_inflight_requests="8",
    triton_max_queue_size="2",
    max_request_bytes=str(4 * 1024 * 1024),
    # Triton's queue policy belongs to its dynamic batcher, which models the gateway
    # batches do not have (their calls never queue deep in Triton): keep it here.
    gateway_batching="false",
)


def published_with_tritons_queue(published: Path, repository: Path, settings: Settings) -> None:
    """The session's MiniLM conversion (``published``) in ``repository`` as a gateway with
    ``settings`` publishes it: Triton's dynamic batcher and queue policy in its config, built
    by the converter's own code from the options the gateway's batching policy gives
    (``tests/converters/test_triton_config.py`` checks that the converter writes them), and
    in its metadata. Only the batcher differs: the ONNX graphs, the parity checks and the
    rest of the config are the same conversion's, so MiniLM is not converted again here.
    Files are hard links to the session's: the two rewritten are new files."""
    target = repository / published.name
    shutil.copytree(published, target, copy_function=link_or_copy, ignore=SERVED)
    options = BatchingPolicy(settings).triton_options("sentence_transformers")
    config_file, metadata_file = target / "config.pbtxt", target / "metadata.json"
    config = triton_config.parse(config_file.read_text())
    built = triton_config.build_text_model_config(config.name, EMBEDDING, config.output[0].dims[0], options)
    config.dynamic_batching.CopyFrom(built.dynamic_batching)
    metadata = json.loads(metadata_file.read_text())
    metadata["dynamic_batching"] = options.dynamic_batching
    for path, text in ((config_file, triton_config.render(config)), (metadata_file, json.dumps(metadata, indent=2))):
        path.unlink()
        path.write_text(text)


@pytest.fixture(scope="module")
def strict(gateway, minilm_published, tmp_path_factory):
    """A gateway with API keys, 8 requests in flight per model and a Triton queue of 2
    (Triton's dynamic batcher), on a repository of its own: the session's MiniLM with this
    gateway's Triton batcher and queue policy written into it."""
    root = tmp_path_factory.mktemp("strict")
    published_with_tritons_queue(gateway.repository / MINILM_TRITON_NAME, root / "repo", Settings(**LIMITS))
    policy = triton_config.parse((root / "repo" / MINILM_TRITON_NAME / "config.pbtxt").read_text())
    assert policy.dynamic_batching.default_queue_policy.max_queue_size == 2
    strict = start_gateway(root / "repo", root / "gateway.log", **LIMITS)
    try:
        with strict.client() as http:
            response = http.post("/load_sentence_transformer_model", json={"model_name": MINILM}, headers=ADMIN)
            assert response.status_code == 200, response.text
            assert response.json()["converted"] is False
        yield strict
    finally:
        strict.stop()


# No warm converter: the conversion past its limit is a process of its own, ended at 1 s
# (a warm one would first import the conversion libraries, seconds for nothing here).
SMALL = dict(max_inflight_requests="2", request_timeout_s="1", conversion_timeout_s="1", converter_warm_s="0")


@pytest.fixture(scope="module")
def small(gateway, minilm_published, tmp_path_factory):
    """A gateway on the session's repository, which has MiniLM (restored at its start),
    with two requests in flight per model, a default deadline of 1 s for requests that
    bring none, and 1 s for a conversion (run cold)."""
    with gateway.client() as http:
        response = http.post("/load_sentence_transformer_model", json={"model_name": MINILM})
        assert response.status_code == 200, response.text
    small = start_gateway(gateway.repository, tmp_path_factory.mktemp("small") / "gateway.log", **SMALL)
    try:
        wait_ready(small)
        yield small
    finally:
        small.stop()


def counts(gateway) -> tuple[int, int]:
    stats = httpx.get(f"{gateway.url}/metrics", headers=USER, timeout=10).json()["model_stats"]
    entry = next(s for s in stats if s["name"] == MINILM)
    return entry["inference_count"], entry["execution_count"]


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["status"] == status and error["message"]
    if code:
        assert error["code"] == code, error
    assert "Traceback" not in response.text
    return error


async def test_a_burst_past_the_limits_gets_its_own_answers_or_clean_refusals(strict, minilm):
    texts = [f"overload sentence {i} about subject {i % 11}" for i in range(96)]
    async with httpx.AsyncClient(base_url=strict.url, headers=USER, timeout=60) as client:
        responses = await asyncio.gather(
            *(client.post("/infer", json={"model_name": MINILM, "text": [t]}) for t in texts)
        )
    ok = [(t, r) for t, r in zip(texts, responses) if r.status_code == 200]
    assert ok
    served = np.asarray([r.json()["text_embeddings"][0] for _, r in ok])
    assert cosine_rows(served, minilm.encode([t for t, _ in ok])).min() >= 0.9999
    # Which limit fires, and how often, depends on the machine's speed (each is made to
    # fire on its own below); every refusal is the documented one.
    for response in responses:
        if response.status_code != 200:
            assert_error(response, 503, "overloaded")
            assert response.headers["retry-after"]


async def test_triton_refuses_past_its_queue_at_once(strict, minilm):
    # Each request is one whole Triton batch (max_batch_size texts of some 25 tokens, a
    # second or more of work): two run, one on each instance, two wait in Triton's queue of
    # two, and the rest are refused as they reach it. The gateway's own limit (8 in flight)
    # is not reached. Each request's 256 texts are one pool's, each in an order of its own (a
    # row answered for the wrong text, in its own request or another's, is another text's
    # embedding), so the library embeds 256 texts once for every row of every answer.
    pool = [f"queued text {i} " + "word " * 20 for i in range(256)]
    requests = [pool[43 * r:] + pool[: 43 * r] for r in range(6)]
    headers = {**USER, "x-request-timeout": "120"}
    async with httpx.AsyncClient(base_url=strict.url, headers=headers, timeout=180) as client:
        async def answered(texts: list[str]) -> tuple[httpx.Response, float]:
            response = await client.post("/infer", json={"model_name": MINILM, "text": texts})
            return response, time.monotonic()

        results = await asyncio.gather(*(answered(texts) for texts in requests))
    refused = [(response, at) for response, at in results if response.status_code != 200]
    accepted = [(texts, r, at) for texts, (r, at) in zip(requests, results) if r.status_code == 200]
    # At least the queue's two: an instance takes its request only once Triton's scheduler
    # runs, which on a loaded machine may come after the queue has filled (3 of 6 seen).
    assert refused and len(accepted) >= 2, [r.status_code for r, _ in results]
    for response, _ in refused:
        assert "queue is full" in assert_error(response, 503, "overloaded")["message"]
        assert response.headers["retry-after"]
    # At once: every refusal came back before the first batch was computed.
    assert max(at for _, at in refused) < min(at for _, _, at in accepted)
    expected = dict(zip(pool, minilm.encode(pool, batch_size=128)))
    for texts, response, _ in accepted:
        served = response.json()["text_embeddings"]
        assert cosine_rows(served, [expected[text] for text in texts]).min() >= 0.9999


async def test_a_saturated_model_refuses_the_next_request_at_once_and_readiness_says_busy(small, minilm):
    big = [f"saturating request {i} " + "word " * 100 for i in range(128)]
    async with httpx.AsyncClient(base_url=small.url, timeout=180) as client:
        # Seconds of work each, with a deadline of their own (this gateway's default is 1 s).
        slow = {"x-request-timeout": "120"}
        load = [
            asyncio.create_task(client.post("/infer", json={"model_name": MINILM, "text": big}, headers=slow))
            for _ in range(2)
        ]
        inflight = lambda: small.metric("embedgate_inflight_requests", model=MINILM)  # noqa: E731
        await wait_until_async(lambda: inflight() == 2, 60, "both requests in flight")
        ready = await client.get("/health/ready")
        refused = await client.post("/infer", json={"model_name": MINILM, "text": ["one more"]}, headers=slow)
        # Both answered from the gateway's own state while the work they report on goes on.
        assert not any(task.done() for task in load)
        answers = await asyncio.gather(*load)
        after = await client.get("/health/ready")
    assert ready.status_code == 503 and ready.json()["status"] == "busy"
    assert "in flight" in assert_error(refused, 503, "overloaded")["message"]
    assert refused.headers["retry-after"]
    expected = minilm.encode(big, batch_size=128)  # every row of both answers, the references once
    for answer in answers:
        assert answer.status_code == 200, answer.text[:300]
        assert cosine_rows(answer.json()["text_embeddings"], expected).min() >= 0.9999
    assert after.json() == {"status": "ready"}


def test_a_request_without_a_deadline_of_its_own_gets_the_servers_and_504(small):
    texts = [f"default deadline text {i} " + "token " * 200 for i in range(256)]  # seconds of work
    started = time.monotonic()
    response = httpx.post(f"{small.url}/infer", json={"model_name": MINILM, "text": texts}, timeout=120)
    elapsed = time.monotonic() - started
    assert_error(response, 504, "deadline_exceeded")
    assert elapsed >= 1.0, "answered before the server's default deadline of 1 s"


def test_a_conversion_past_its_time_limit_is_504_and_leaves_nothing(small, minilm_path):
    started = time.monotonic()
    response = httpx.post(
        f"{small.url}/load_sentence_transformer_model",
        json={"model_name": "local/too-slow", "model_path": minilm_path},
        timeout=300,
    )
    assert "did not finish in 1s" in assert_error(response, 504, "deadline_exceeded")["message"]
    assert time.monotonic() - started >= 1.0
    assert converter_processes(small) == []
    assert_nothing_half_written(small.repository, "local--too-slow")


def test_a_request_past_its_deadline_gets_504(strict):
    texts = [f"deadline text {i} " + "token " * 100 for i in range(300)]
    response = httpx.post(
        f"{strict.url}/infer",
        json={"model_name": MINILM, "text": texts},
        headers={**USER, "x-request-timeout": "0.01"},
        timeout=30,
    )
    assert_error(response, 504, "deadline_exceeded")


async def test_a_client_that_disconnects_stops_costing_work(gateway, minilm_loaded, minilm):
    before, _ = counts(gateway)
    log_start = len(gateway.log())
    # 2048 texts: 8 chunks of max_batch_size (256), at most 4 of them in Triton at once,
    # each seconds of work (about 35 tokens a text). The client gives up after a second.
    texts = [f"abandoned text {i} " + "token " * 30 for i in range(2048)]
    with pytest.raises(httpx.TimeoutException):
        httpx.post(f"{gateway.url}/infer", json={"model_name": MINILM, "text": texts}, timeout=1.0)
    await asyncio.to_thread(gateway.wait_log, "client disconnected", 60, log_start)
    # Its admission slot is back long before the whole request could have been computed.
    inflight = lambda: gateway.metric("embedgate_inflight_requests", model=MINILM)  # noqa: E731
    await wait_until_async(lambda: inflight() == 0, 60, "its admission slot to be released")
    # A request of one text, queued in Triton behind whatever of it Triton was given (on a
    # starved machine that takes longer than the default deadline: it may take the most).
    marker = httpx.post(
        f"{gateway.url}/infer",
        json={"model_name": MINILM, "text": ["after"]},
        headers={"x-request-timeout": "300"},
        timeout=360,
    )
    assert marker.status_code == 200, marker.text
    assert cosine_rows(marker.json()["text_embeddings"], minilm.encode(["after"]))[0] >= 0.9999
    after, _ = counts(gateway)
    # Only chunks sent before the client left were computed; no more were sent after.
    assert after - before - 1 <= 4 * 256, f"{after - before - 1} of {len(texts)} texts embedded"
    assert httpx.get(f"{gateway.url}/health/ready", timeout=5).json() == {"status": "ready"}


async def test_bad_input_gets_clear_errors_while_everyone_else_is_served(strict, minilm):
    stop = asyncio.Event()
    good_statuses: list[int] = []
    computed: list[tuple[str, list[float]]] = []

    async def good_client(client: httpx.AsyncClient, number: int) -> None:
        sent = 0
        while not stop.is_set():
            # A text of its own each time: the model runs for it while the bad inputs flow.
            text = f"a steady good request {number} {sent}"
            sent += 1
            response = await client.post("/infer", json={"model_name": MINILM, "text": [text]})
            good_statuses.append(response.status_code)
            if response.status_code == 200:
                assert response.headers["x-cached-inputs"] == "0"
                computed.append((text, response.json()["text_embeddings"][0]))

    url = "/infer"
    cases = [
        (dict(content=b'{"model_name": ', headers={"content-type": "application/json"}), 400, "malformed_json"),
        (dict(json={"model_name": MINILM, "text": [1, {"a": 2}]}), 422, "invalid_request"),
        (dict(json={"model_name": MINILM, "text": []}), 400, "bad_request"),
        (dict(json={"model_name": MINILM, "text": ["x"] * 2049}), 413, "too_many_inputs"),
        (dict(content=b'{"model_name": "a", "text": ["\xff\xfe"]}', headers={"content-type": "application/json"}), 400, "malformed_body"),
        (dict(json={"model_name": "nobody/nothing", "text": ["a"]}), 404, "model_not_found"),
        (dict(json={"model_name": "../../etc/passwd", "text": ["a"]}), 422, "invalid_model_name"),
        (dict(json={"model_name": "a b%00c", "text": ["a"]}), 422, "invalid_model_name"),
        (dict(content=b"x" * (5 * 1024 * 1024), headers={"content-type": "application/json"}), 413, "body_too_large"),
        (dict(content=b"model_name=x", headers={"content-type": "application/x-www-form-urlencoded"}), 415, "unsupported_media_type"),
        (dict(json={"model_name": MINILM, "text": ["a"]}, headers={"authorization": "Bearer wrong"}), 401, "unauthorized"),
    ]
    async with httpx.AsyncClient(base_url=strict.url, headers=USER, timeout=60) as client:
        good = [asyncio.create_task(good_client(client, number)) for number in range(2)]
        for kwargs, status, code in cases:
            headers = {**USER, **kwargs.pop("headers", {})}
            assert_error(await client.post(url, headers=headers, **kwargs), status, code)
        long_text = "a very long text " * 400
        for _ in range(50):  # this gateway's tiny Triton queue may say 503: retry, as a client would
            truncated = await client.post(url, json={"model_name": MINILM, "text": [long_text, "short"]})
            if truncated.status_code != 503:
                break
            await asyncio.sleep(0.1)
        stop.set()
        await asyncio.gather(*good)
    assert truncated.status_code == 200 and truncated.headers["x-truncated-inputs"] == "1"
    # Others only ever see answers or this gateway's own overload limits, never a failure.
    assert set(good_statuses) <= {200, 503} and good_statuses.count(200) > 0
    texts = [text for text, _ in computed]
    assert cosine_rows([vector for _, vector in computed], minilm.encode(texts)).min() >= 0.9999


def test_keys_decide_who_may_do_what(strict):
    body = {"model_name": MINILM}
    assert_error(httpx.post(f"{strict.url}/unload_model", json=body, timeout=10), 401, "unauthorized")
    assert_error(httpx.post(f"{strict.url}/unload_model", json=body, headers=USER, timeout=10), 403, "forbidden")
    assert httpx.get(f"{strict.url}/health", timeout=5).status_code == 200
    assert_error(httpx.get(f"{strict.url}/metrics", timeout=5), 401, "unauthorized")
    refused = httpx.post(
        f"{strict.url}/load_sentence_transformer_model",
        json={"model_name": "local/remote-code", "model_path": "/tmp", "trust_remote_code": True},
        headers=ADMIN,
        timeout=10,
    )
    assert_error(refused, 403, "forbidden")


def converter_processes(gateway) -> list[int]:
    """The conversions running for ``gateway``: its cold converter children, or the
    processes its warm converter forked (not the warm converter itself)."""
    table = processes()
    parent = {pid: ppid for pid, _, ppid in table}
    commands = {}
    for pid, _, _ in table:
        try:
            commands[pid] = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            pass
    gateway_pid = gateway.process.pid
    warm = {pid for pid, command in commands.items() if b"converters.warm" in command and parent[pid] == gateway_pid}
    return sorted(
        pid
        for pid, command in commands.items()
        if b"converters" in command and (parent[pid] in warm or (parent[pid] == gateway_pid and pid not in warm))
    )


def assert_nothing_half_written(repository: Path, triton_name: str) -> None:
    assert not (repository / triton_name).exists()
    staging = repository / ".staging"
    assert not staging.exists() or not any(p.name.startswith(triton_name) for p in staging.iterdir())


async def test_a_conversion_killed_midway_leaves_nothing_and_serving_goes_on(strict, minilm_path, minilm):
    log_start = len(strict.log())
    async with httpx.AsyncClient(base_url=strict.url, headers=ADMIN, timeout=120) as client:
        load = asyncio.create_task(
            client.post("/load_sentence_transformer_model", json={"model_name": "local/crash-me", "model_path": minilm_path})
        )
        pids = await wait_until_async(lambda: converter_processes(strict), 60, "the conversion to start")
        # Killed once it has torch and is loading the model (its step says so).
        loading = re.compile(r"\[local/crash-me\] \[\s*[\d.]+s\] loading model")
        await asyncio.to_thread(strict.wait_log, loading, 120, log_start)
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        response = await load
        served = await client.post("/infer", json={"model_name": MINILM, "text": ["still serving"]}, headers=USER)
    error = assert_error(response, 500, "conversion_crashed")
    assert "nothing was published" in error["message"]
    assert_nothing_half_written(strict.repository, "local--crash-me")
    assert served.status_code == 200, served.text
    assert cosine_rows(served.json()["text_embeddings"], minilm.encode(["still serving"]))[0] >= 0.9999


async def test_a_model_deleted_under_load_fails_cleanly_then_comes_back(strict, tiny_dense):
    """With a tiny model: it is converted twice here, in seconds each."""
    directory, library = tiny_dense
    name = "local/deleted-under-load"
    load = {"model_name": name, "model_path": str(directory)}
    with strict.client() as http:
        assert http.post("/load_sentence_transformer_model", json=load, headers=ADMIN).status_code == 200
    texts = [f"delete race {i}" for i in range(48)]
    async with httpx.AsyncClient(base_url=strict.url, headers=USER, timeout=60) as client:
        requests = [asyncio.create_task(client.post("/infer", json={"model_name": name, "text": [t]})) for t in texts]
        # Deleted once it is seen serving, with the other requests still coming.
        await asyncio.wait(requests, return_when=asyncio.FIRST_COMPLETED)
        deleted = await client.post("/delete_model", json={"model_name": name}, headers=ADMIN)
        responses = await asyncio.gather(*requests)
    assert deleted.status_code == 200, deleted.text
    for text, response in zip(texts, responses):
        if response.status_code == 200:
            assert cosine_rows(response.json()["text_embeddings"], library.encode([text]))[0] >= 0.9999
        else:
            assert_error(response, response.status_code)
            assert response.status_code in (404, 409, 503)
    assert_error(httpx.post(f"{strict.url}/infer", json={"model_name": name, "text": ["x"]}, headers=USER), 404)
    with strict.client() as http:
        again = http.post("/load_sentence_transformer_model", json=load, headers=ADMIN)
        assert again.status_code == 200 and again.json()["converted"] is True
        served = http.post("/infer", json={"model_name": name, "text": ["back again"]}, headers=USER)
        assert cosine_rows(served.json()["text_embeddings"], library.encode(["back again"]))[0] >= 0.9999
        assert http.post("/delete_model", json={"model_name": name}, headers=ADMIN).status_code == 200


async def test_triton_killed_during_a_load_is_waited_out_and_the_load_made_again(strict, minilm):
    """docs/limits.md: a load that Triton died under is made again once the supervisor has
    Triton back, so its caller sees a slower 200."""
    with strict.client() as http:
        assert http.post("/unload_model", json={"model_name": MINILM}, headers=ADMIN).status_code == 200
    (triton_pid,) = strict.children("tritonserver")
    log_start = len(strict.log())
    async with httpx.AsyncClient(base_url=strict.url, headers=ADMIN, timeout=300) as client:
        load = asyncio.create_task(client.post("/load_sentence_transformer_model", json={"model_name": MINILM}))
        # Killed while Triton loads the model (the load's step says it has begun).
        loading = re.compile(re.escape(f"[{MINILM}] [") + r"\s*[\d.]+s\] loading into Triton")
        await asyncio.to_thread(strict.wait_log, loading, 60, log_start)
        os.kill(triton_pid, signal.SIGKILL)
        loaded = await load
        assert loaded.status_code == 200, loaded.text
        served = await client.post("/infer", json={"model_name": MINILM, "text": ["after the crash"]}, headers=USER)
    assert cosine_rows(served.json()["text_embeddings"], minilm.encode(["after the crash"]))[0] >= 0.9999
    log = strict.log()[log_start:]
    assert "tritonserver exited unexpectedly" in log
    assert f"triton restarted while loading {MINILM}; loading it again" in log
    (new_pid,) = strict.children("tritonserver")
    assert new_pid != triton_pid


def test_a_conversion_out_of_memory_is_a_clear_error(tmp_path, minilm_path):
    gateway = start_gateway(tmp_path / "repo", tmp_path / "gateway.log", conversion_memory_limit_mb="400")
    try:
        with gateway.client() as http:
            response = http.post(
                "/load_sentence_transformer_model", json={"model_name": "local/oom", "model_path": minilm_path}
            )
            assert_error(response, 500, "conversion_out_of_memory")
            assert http.get("/health").status_code == 200
    finally:
        gateway.stop()
    assert_nothing_half_written(tmp_path / "repo", "local--oom")


@pytest.fixture
def small_disk(tmp_path):
    """A disk of 256 KiB: room for the gateway's own files, not for a converted model."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True, text=True)
    assert done.returncode == 0, f"cannot mount a tmpfs for the disk-full test: {done.stderr}"
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_during_publish_is_507_and_leaves_nothing(small_disk, tmp_path, tiny_dense):
    gateway = start_gateway(small_disk / "repo", tmp_path / "gateway.log")
    try:
        with gateway.client() as http:
            load = {"model_name": "local/too-big", "model_path": str(tiny_dense[0])}
            response = http.post("/load_sentence_transformer_model", json=load)
            assert_error(response, 507, "insufficient_storage")
            assert http.get("/health/ready").json() == {"status": "ready"}
    finally:
        gateway.stop()
    assert_nothing_half_written(small_disk / "repo", "local--too-big")
