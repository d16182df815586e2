"""Keys are tenants, on the real gateway and tritonserver: with the official ``openai``
client, each key finds only its own files and batches (another key's ids are not found and
nothing of them changes) while an admin key finds every key's; a key past its per-minute
limit gets 429 with Retry-After and OpenAI's rate-limit headers; and while one key floods
the server at several times what it can answer, another key's requests are all answered,
with the PyTorch model's vectors, and the per-key metrics say who sent what and who was
refused."""

from __future__ import annotations

import asyncio
import io
import json
import shutil
import time
import uuid

import httpx
import numpy as np
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from embedgate.api.http.auth import tenant_of
from tests.helpers import cosine_rows

from .conftest import MINILM, start_gateway, wait_ready
from .test_batches import jsonl, line, read_jsonl, texts, wait_done
from .worker_clients import connections

KEY_A, KEY_B, ADMIN = "tenant-key-a", "tenant-key-b", "tenant-admin-key"
NAME_A = "team-a"
LABEL_B = tenant_of(KEY_B, admin=False, name=None, secret="").label
WORDS = "a light client asks about the weather in a town by the sea while the flood goes on".split()


def own_gateway(gateway, tmp_path, **settings):
    """A gateway with keys on a repository of its own (the session's converted MiniLM,
    copied: a load without conversion), so its job store holds only this test's jobs."""
    repository = tmp_path / "repository"
    repository.mkdir()
    name = MINILM.replace("/", "--")
    shutil.copytree(gateway.repository / name, repository / name)
    keyed = start_gateway(
        repository, tmp_path / "gateway.log", api_keys=f"{KEY_A},{KEY_B}", admin_keys=ADMIN,
        key_names=f"{NAME_A}={KEY_A}", preload_models=MINILM, **settings,
    )
    wait_ready(keyed)
    return keyed


@pytest.fixture
def owners(gateway, minilm_loaded, tmp_path):
    keyed = own_gateway(gateway, tmp_path, key_requests_per_minute="3")
    try:
        yield keyed
    finally:
        keyed.stop()


def client_of(gateway, key: str) -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=f"{gateway.url}/v1", max_retries=0, timeout=120)


def not_found(call, *args) -> dict:
    with pytest.raises(openai.NotFoundError) as refused:
        call(*args)
    return refused.value.body


def test_each_key_finds_only_its_own_files_and_batches_and_an_admin_finds_all(owners):
    with client_of(owners, KEY_A) as a, client_of(owners, KEY_B) as b, client_of(owners, ADMIN) as admin:
        secret = [f"alice's private document {n}" for n in range(30)]
        small = a.files.create(file=("a.jsonl", io.BytesIO(jsonl(
            [line(f"a{n}", {"model": MINILM, "input": text}) for n, text in enumerate(secret)]
        ))), purpose="batch")
        done = wait_done(a, a.batches.create(input_file_id=small.id, endpoint="/v1/embeddings",
                                             completion_window="24h").id)
        assert done.status == "completed" and done.output_file_id
        # A batch that keeps running while B tries to cancel it.
        big = a.files.create(file=("big.jsonl", io.BytesIO(jsonl(
            [line(f"r{n}", {"model": MINILM, "input": text}) for n, text in enumerate(texts(3000, seed=7))]
        ))), purpose="batch")
        running = a.batches.create(input_file_id=big.id, endpoint="/v1/embeddings", completion_window="24h")
        mine = b.files.create(file=("b.jsonl", io.BytesIO(jsonl([line("b", {"model": MINILM, "input": "bob"})]))),
                              purpose="batch")
        bobs_batch = b.batches.create(input_file_id=mine.id, endpoint="/v1/embeddings", completion_window="24h")
        alices_files = {small.id, big.id, done.output_file_id}
        alices_batches = {done.id, running.id}

        suffix = bobs_batch.id.removeprefix("batch_")
        bobs_files = {mine.id, f"file-{suffix}-output", f"file-{suffix}-errors"}  # its outputs, once done
        assert mine.id in {f.id for f in b.files.list()} and {f.id for f in b.files.list()} <= bobs_files
        assert {x.id for x in b.batches.list()} == {bobs_batch.id}

        unknown_file, unknown_batch = "file-" + "0" * 24, "batch_" + "0" * 24
        for file_id in alices_files:
            for call in (b.files.retrieve, b.files.content, b.files.delete):
                theirs, nobodys = not_found(call, file_id), not_found(call, unknown_file)
                assert theirs == json.loads(json.dumps(nobodys).replace(unknown_file, file_id))
        for batch_id in alices_batches:
            for call in (b.batches.retrieve, b.batches.cancel):
                theirs, nobodys = not_found(call, batch_id), not_found(call, unknown_batch)
                assert theirs == json.loads(json.dumps(nobodys).replace(unknown_batch, batch_id))
        # B created a batch from its own file; from A's it cannot.
        with pytest.raises(openai.NotFoundError):
            b.batches.create(input_file_id=small.id, endpoint="/v1/embeddings", completion_window="24h")

        # Nothing of A's changed.
        assert a.batches.retrieve(running.id).status == "in_progress"
        assert a.batches.retrieve(done.id).status == "completed"
        assert {f.id for f in a.files.list()} >= alices_files
        rows = [json.loads(row) for row in a.files.content(small.id).text.splitlines()]
        assert [row["body"]["input"] for row in rows] == secret
        assert len(read_jsonl(a, done.output_file_id)) == len(secret)

        # The admin key finds both keys' files and batches, and may manage A's.
        assert {f.id for f in admin.files.list()} >= alices_files | {mine.id}
        assert {x.id for x in admin.batches.list()} >= alices_batches | {bobs_batch.id}
        assert admin.batches.retrieve(done.id).output_file_id == done.output_file_id
        assert admin.batches.cancel(running.id).status in ("cancelling", "cancelled")
        assert wait_done(a, running.id).status == "cancelled"


def test_a_key_past_its_limit_gets_429_with_retry_after_and_openais_headers(owners):
    with client_of(owners, KEY_B) as b, client_of(owners, KEY_A) as a:
        # Bulk jobs are not counted: a job of more lines than the key's minute allows runs
        # to its end, and leaves the key's allowance whole.
        lines = [line(f"n{n}", {"model": MINILM, "input": f"not counted {uuid.uuid4()} {n}"}) for n in range(20)]
        uploaded = b.files.create(file=("n.jsonl", io.BytesIO(jsonl(lines))), purpose="batch")
        job = b.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h")
        done = wait_done(b, job.id)
        assert done.status == "completed" and done.request_counts.completed == len(lines), done
        remaining = []
        for n in range(3):
            raw = b.embeddings.with_raw_response.create(model=MINILM, input=f"limited {uuid.uuid4()} {n}")
            assert raw.headers["x-ratelimit-limit-requests"] == "3"
            remaining.append(int(raw.headers["x-ratelimit-remaining-requests"]))
        assert remaining == [2, 1, 0]
        with pytest.raises(openai.RateLimitError) as refused:
            b.embeddings.create(model=MINILM, input="one too many")
        answer = refused.value.response
        assert int(answer.headers["retry-after"]) >= 1 and answer.headers["x-ratelimit-remaining-requests"] == "0"
        assert refused.value.body["code"] == "rate_limited"
        assert a.embeddings.create(model=MINILM, input="a has its own allowance").data  # A is not B


def test_ownership_holds_across_gateway_workers(gateway, minilm_loaded, tmp_path):
    """With workers, each worker reaches the primary's coordinator: whichever worker a
    key asks, it finds its own files, batches, outputs and error files and none of the
    other key's (A of B's as B of A's); a page cursor naming the other key's batch pages as
    an unknown id does; the admin key finds both."""
    server = own_gateway(gateway, tmp_path, workers="2")
    headers = {key: {"authorization": f"Bearer {key}"} for key in (KEY_A, KEY_B, ADMIN)}
    clients = connections(server.url)
    try:
        owned = {}
        for worker, key in enumerate((KEY_A, KEY_B)):
            # Each key's job through another worker; a line naming no loaded model is its error.
            body = jsonl([line("ok", {"model": MINILM, "input": f"a document of {key}'s, through worker {worker}"}),
                          line("bad", {"model": "org/not-loaded", "input": "x"})])
            uploaded = clients[worker].post("/v1/files", files={"file": ("j.jsonl", body)}, data={"purpose": "batch"},
                                            headers=headers[key]).json()
            created = clients[worker].post("/v1/batches", headers=headers[key], json={
                "input_file_id": uploaded["id"], "endpoint": "/v1/embeddings", "completion_window": "24h"}).json()
            owned[key] = (uploaded["id"], created["id"])
        for key, (file_id, batch_id) in owned.items():
            deadline = time.monotonic() + 300
            while (batch := clients[1].get(f"/v1/batches/{batch_id}", headers=headers[key]).json())["status"] != "completed":
                assert time.monotonic() < deadline and batch["status"] in ("validating", "in_progress", "finalizing"), batch
                time.sleep(0.2)
            assert batch["output_file_id"] and batch["error_file_id"], batch
            owned[key] = {"files": [file_id, batch["output_file_id"], batch["error_file_id"]], "batch": batch_id}

        unknown_batch = "batch_" + "0" * 24
        for client in clients.values():
            for mine, theirs in ((KEY_A, KEY_B), (KEY_B, KEY_A)):
                me, other = owned[mine], owned[theirs]
                assert client.get(f"/v1/batches/{me['batch']}", headers=headers[mine]).status_code == 200
                assert client.get(f"/v1/batches/{other['batch']}", headers=headers[mine]).status_code == 404
                assert client.post(f"/v1/batches/{other['batch']}/cancel", headers=headers[mine]).status_code == 404
                for file_id in me["files"]:
                    assert client.get(f"/v1/files/{file_id}/content", headers=headers[mine]).status_code == 200
                for file_id in other["files"]:
                    assert client.get(f"/v1/files/{file_id}", headers=headers[mine]).status_code == 404
                    assert client.get(f"/v1/files/{file_id}/content", headers=headers[mine]).status_code == 404
                listed = {f["id"] for f in client.get("/v1/files", headers=headers[mine]).json()["data"]}
                assert set(me["files"]) <= listed and not listed & set(other["files"])
                batches = [b["id"] for b in client.get("/v1/batches", headers=headers[mine]).json()["data"]]
                assert batches == [me["batch"]]
                # A cursor at the other key's batch finds what an unknown one finds: nothing.
                for cursor in (other["batch"], unknown_batch):
                    page = client.get("/v1/batches", params={"after": cursor}, headers=headers[mine]).json()
                    assert page["data"] == [], cursor
            seen = {b["id"] for b in client.get("/v1/batches", headers=headers[ADMIN]).json()["data"]}
            assert seen == {owned[KEY_A]["batch"], owned[KEY_B]["batch"]}
            for key in (KEY_A, KEY_B):
                for file_id in owned[key]["files"]:
                    assert client.get(f"/v1/files/{file_id}/content", headers=headers[ADMIN]).status_code == 200
    finally:
        for client in clients.values():
            client.close()
        server.stop()


FLOOD_S = 5.0
FLOOD_TEXTS = 32
LIGHT_PER_S = 4
MIN_LIGHT_PER_S = 1.2  # B sends at least 6 requests in the flood's 5 s
INFLIGHT_LIMIT = 24
CALIBRATION_CLIENTS = 8


def light_per_s(capacity: float) -> float:
    """B's rate: light whatever the machine's speed. B holds its rate times its latency in
    flight, and its latency under the flood is about two merged calls (one running, then
    its own), each what a calibration request took (its clients over the capacity); B is
    refused only at its share (the limit over the two keys), so it stays under half that."""
    latency_s = 2 * CALIBRATION_CLIENTS / capacity
    return max(MIN_LIGHT_PER_S, min(LIGHT_PER_S, (INFLIGHT_LIMIT / 2 / 2) / latency_s))


@pytest.fixture
def flooded(gateway, minilm_loaded, tmp_path):
    keyed = own_gateway(gateway, tmp_path, max_inflight_requests=str(INFLIGHT_LIMIT))
    try:
        yield keyed
    finally:
        keyed.stop()


async def answered_per_s(
    client: httpx.AsyncClient, sentence, seconds: float = 3.0, clients: int = CALIBRATION_CLIENTS
) -> float:
    """What the server answers of the flood's requests, a second, with ``clients`` of them
    always in flight: the flood is sent at several times that, whatever the machine."""
    done, deadline = 0, time.monotonic() + seconds

    async def loop(number: int) -> None:
        nonlocal done
        while time.monotonic() < deadline:
            texts = [sentence(-(10**6) * (number + 1) - 100 * done - i) for i in range(FLOOD_TEXTS)]
            response = await client.post("/infer", json={"model_name": MINILM, "text": texts})
            assert response.status_code == 200, response.text
            done += 1

    started = time.monotonic()
    await asyncio.gather(*(loop(n) for n in range(clients)))
    return done / (time.monotonic() - started)


async def test_a_light_key_is_served_while_another_floods(flooded, minilm):
    run = uuid.uuid4().hex[:8]  # inputs new to the server: the response cache has none of them
    rng = np.random.default_rng(0)

    def sentence(n: int) -> str:
        return f"{run} {n} " + " ".join(rng.choice(WORDS, size=12))

    flood: list[httpx.Response] = []
    # B's requests: its text, the answer, and how many of B's own were in flight when it was sent.
    light: list[tuple[str, httpx.Response, int]] = []
    light_in_flight = 0

    async def open_loop(client: httpx.AsyncClient, per_s: float, send) -> None:
        tasks, started = [], time.monotonic()
        for n in range(int(FLOOD_S * per_s)):
            await asyncio.sleep(max(0.0, started + n / per_s - time.monotonic()))
            tasks.append(asyncio.create_task(send(client, n)))
        await asyncio.gather(*tasks)

    async def flood_one(client: httpx.AsyncClient, n: int) -> None:
        body = {"model_name": MINILM, "text": [sentence(1000 * n + i) for i in range(FLOOD_TEXTS)]}
        flood.append(await client.post("/infer", json=body))

    async def light_one(client: httpx.AsyncClient, n: int) -> None:
        nonlocal light_in_flight
        text, sent_with = f"light {sentence(n)}", light_in_flight
        light_in_flight += 1
        try:
            response = await client.post("/v1/embeddings", json={"model": MINILM, "input": text})
        finally:
            light_in_flight -= 1
        light.append((text, response, sent_with))

    limits = httpx.Limits(max_connections=400, max_keepalive_connections=400)
    async with (
        httpx.AsyncClient(base_url=flooded.url, headers={"authorization": f"Bearer {KEY_A}"}, timeout=120,
                          limits=limits) as a,
        httpx.AsyncClient(base_url=flooded.url, headers={"authorization": f"Bearer {KEY_B}"}, timeout=120) as b,
    ):
        capacity = await answered_per_s(a, sentence)
        flood_per_s = min(400.0, max(20.0, 10 * capacity))
        await asyncio.gather(open_loop(a, flood_per_s, flood_one), open_loop(b, light_per_s(capacity), light_one))

    served_light = [(text, response) for text, response, _ in light if response.status_code == 200]
    light_refused = [(response, sent_with) for _, response, sent_with in light if response.status_code != 200]
    waits = sorted(response.elapsed.total_seconds() for _, response in served_light)
    print(f"\ncapacity {capacity:.1f} requests/s; light {light_per_s(capacity):.1f}/s; flood: {len(flood)} sent, "
          f"{sum(r.status_code == 200 for r in flood)} answered; "
          f"light: {len(light)} sent, {len(served_light)} answered, "
          f"median {waits[len(waits) // 2]:.2f}s, slowest {waits[-1]:.2f}s")
    assert len(served_light) >= int(FLOOD_S * MIN_LIGHT_PER_S)
    # B is never refused for A's flood: only where B itself held its share of the limit (the
    # limit over the two keys), which B's rate keeps it under unless the machine slows down
    # past the calibration (what B had in flight when it sent a request bounds what the
    # server counted of B's when it refused it).
    for response, sent_with in light_refused:
        assert response.status_code == 503 and sent_with >= INFLIGHT_LIMIT / 2, (sent_with, response.text)
    # B waits its own turn, not behind the flood: about two merged calls (one running, then
    # its own; a calibration request's time each), with room for a loaded machine.
    call_s = CALIBRATION_CLIENTS / capacity
    assert waits[len(waits) // 2] <= 6 * call_s + 0.5, (waits, call_s)
    assert all(response.headers["x-cached-inputs"] == "0" for _, response in served_light)
    served = np.asarray([response.json()["data"][0]["embedding"] for _, response in served_light])
    assert cosine_rows(served, minilm.encode([text for text, _ in served_light])).min() >= 0.9999

    refused = [r for r in flood if r.status_code != 200]
    answered = len(flood) - len(refused)
    # The flood was one (ten times what was answered before it: more texts in flight merge
    # into larger calls, which answer more a second): most of it was refused, at once, as
    # the documented overload.
    assert len(refused) > answered, (len(refused), answered)
    # No per-key limit is set here: every refusal is the server's overload (503), never a
    # key's rate limit (a 429 would be a wrong charge).
    for response in refused:
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "overloaded"
        assert int(response.headers["retry-after"]) >= 1

    # Who sent what, and who was refused, per key: by name, or by a short hash.
    text = httpx.get(f"{flooded.url}/metrics/prometheus", headers={"authorization": f"Bearer {ADMIN}"}).text
    assert KEY_A not in text and KEY_B not in text
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("embedgate_key_")
    }
    assert samples[("embedgate_key_requests_total", (("key", LABEL_B), ("status", "200")))] == len(served_light)
    assert samples[("embedgate_key_inputs_total", (("key", LABEL_B),))] == len(served_light)
    calibration = samples[("embedgate_key_requests_total", (("key", NAME_A), ("status", "200")))] - answered
    assert calibration > 0
    assert samples[("embedgate_key_inputs_total", (("key", NAME_A),))] == FLOOD_TEXTS * (answered + calibration)
    refusals = sum(v for (name, labels), v in samples.items()
                   if name == "embedgate_key_rejections_total" and ("key", NAME_A) in labels)
    assert refusals == len(refused)
    assert sum(v for (name, labels), v in samples.items()
               if name == "embedgate_key_rejections_total" and ("key", LABEL_B) in labels) == len(light_refused)
