"""``benchmark.py --job``: a bulk job's speed, and what it costs online requests.

Three measurements of one run, against a running server:

1. **A job on an idle server**: ``--job-texts`` of the benchmark's 8-30-token sentences,
   one per line, uploaded, created, followed to its end; texts per second from creation to
   completion, against the model's sorted in-process limit (the same texts, sorted, in
   batches, with every core: the mean of a run before the job and one after).
2. **Online latency without a job**: ``--concurrency`` clients (8 by default) sending one
   sentence each, for ``--duration`` seconds; p50 and p99.
3. **Online latency with a job running**: the same load while a large job runs (it is
   cancelled afterwards); the job's own rate meanwhile.

The ratios printed are the ones the bulk lane is held to: the job's idle rate over the
sorted limit, and online p99 with a job over without.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from embedgate.bench.connection import Target
from embedgate.bench.endpoints import build_endpoint
from embedgate.bench.loadgen import run_load
from embedgate.bench.payloads import SentencePayload
from embedgate.bench.report import load_summary

POLL_S = 0.1
FINISHED = ("completed", "failed", "cancelled", "expired")


@dataclass(frozen=True)
class Seeds:
    """Each phase's inputs, from a seed of its own: a phase that sent what an earlier one
    sent would be answered by the response cache, not the model."""

    job: int
    background: int
    alone: int
    beside: int

    @classmethod
    def of(cls, seed: int) -> Seeds:
        return cls(job=seed, background=seed + 1, alone=seed + 2, beside=seed + 3)


def job_lines(model: str, texts: list[str], endpoint: str = "/v1/embeddings") -> bytes:
    lines = (
        json.dumps({"custom_id": f"t{i}", "method": "POST", "url": endpoint, "body": {"model": model, "input": text}})
        for i, text in enumerate(texts)
    )
    return ("\n".join(lines) + "\n").encode()


class Jobs:
    """The Files and Batch APIs of the server under test."""

    def __init__(self, session: aiohttp.ClientSession, url: str):
        self.session = session
        self.url = url.rstrip("/")

    async def submit(self, content: bytes) -> dict[str, Any]:
        form = aiohttp.FormData()
        form.add_field("purpose", "batch")
        form.add_field("file", content, filename="job.jsonl", content_type="application/jsonl")
        async with self.session.post(f"{self.url}/v1/files", data=form) as response:
            uploaded = await _json(response)
        body = {"input_file_id": uploaded["id"], "endpoint": "/v1/embeddings", "completion_window": "24h"}
        async with self.session.post(f"{self.url}/v1/batches", json=body) as response:
            return await _json(response)

    async def get(self, batch_id: str) -> dict[str, Any]:
        async with self.session.get(f"{self.url}/v1/batches/{batch_id}") as response:
            return await _json(response)

    async def cancel(self, batch_id: str) -> None:
        async with self.session.post(f"{self.url}/v1/batches/{batch_id}/cancel") as response:
            await response.read()

    async def wait(self, batch_id: str) -> dict[str, Any]:
        while (batch := await self.get(batch_id))["status"] not in FINISHED:
            await asyncio.sleep(POLL_S)
        return batch


async def _json(response: aiohttp.ClientResponse) -> dict[str, Any]:
    text = await response.text()
    if response.status >= 400:
        raise SystemExit(f"{response.method} {response.url} answered {response.status}: {text[:500]}")
    return json.loads(text)


def texts_of(count: int, seed: int) -> list[str]:
    payload = SentencePayload(per_request=1, seed=seed)
    return [payload.inputs(index)[0] for index in range(count)]


async def measure_job(jobs: Jobs, model: str, texts: list[str]) -> dict[str, Any]:
    """A job of ``texts`` on the server as it is: its rate from creation to completion."""
    batch = await jobs.submit(job_lines(model, texts))
    started = time.perf_counter()
    done = await jobs.wait(batch["id"])
    seconds = time.perf_counter() - started
    if done["status"] != "completed" or done["request_counts"]["failed"]:
        raise SystemExit(f"the benchmark's job did not complete cleanly: {done['status']} {done['request_counts']}")
    return {"texts": len(texts), "seconds": round(seconds, 3), "texts_per_s": round(len(texts) / seconds, 2)}


async def online(target: Target, model: str, concurrency: int, duration_s: float, timeout_s: float, seed: int) -> dict:
    endpoint = build_endpoint("/infer", model, None)
    payload = SentencePayload(per_request=1, seed=seed)
    await run_load(target, endpoint, payload, concurrency=concurrency, timeout_s=timeout_s, duration_s=2.0)
    run = await run_load(target, endpoint, payload, concurrency=concurrency, timeout_s=timeout_s,
                         duration_s=duration_s, first_index=1_000_000)
    summary = load_summary(run)
    latency = summary["response_time_s"] or {}
    return {
        "requests": summary["successful_requests"],
        "failed": summary["failed_requests"],
        "embeddings_per_s": summary["embeddings_per_s"],
        "p50_ms": round(latency.get("p50", 0) * 1000, 2),
        "p99_ms": round(latency.get("p99", 0) * 1000, 2),
    }


async def online_beside_a_job(
    jobs: Jobs, target: Target, model: str, texts: list[str], clients: int, duration_s: float, timeout_s: float,
    seed: int,
) -> dict[str, Any]:
    """Online latency while a job runs; the job's rate meanwhile (then it is cancelled)."""
    batch = await jobs.submit(job_lines(model, texts))
    while (await jobs.get(batch["id"]))["request_counts"]["completed"] == 0:
        await asyncio.sleep(POLL_S)
    before = (await jobs.get(batch["id"]))["request_counts"]["completed"]
    started = time.perf_counter()
    result = await online(target, model, clients, duration_s, timeout_s, seed)
    seconds = time.perf_counter() - started
    after = await jobs.get(batch["id"])
    result["job_texts_per_s"] = round((after["request_counts"]["completed"] - before) / seconds, 2)
    result["job_still_running"] = after["status"] == "in_progress"
    await jobs.cancel(batch["id"])
    await jobs.wait(batch["id"])
    return result


async def run(args, report: dict, *, load_model, open_model, progress) -> None:
    """The three measurements (see the module's docstring) into ``report``."""
    from embedgate.bench import inprocess

    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    # No keep-alive for these few calls: the in-process runs between them block this loop
    # for longer than the server keeps an idle connection.
    connector = aiohttp.TCPConnector(force_close=True)
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    async with aiohttp.ClientSession(timeout=timeout, headers=headers, connector=connector) as session:
        if not args.no_load:
            await load_model(session, args)
        jobs = Jobs(session, args.url)
        target = Target.from_url(args.url, headers)
        seeds = Seeds.of(args.seed)
        texts = texts_of(args.job_texts, seeds.job)
        model = open_model(args)
        inprocess.warm_up(model, texts)
        progress(f"in-process sorted limit before the job: {len(texts)} texts")
        before = inprocess.run_baseline(model, texts, "length_sorted", args.inprocess_batch_size).as_dict()
        progress(f"a job of {len(texts)} texts on the idle server")
        report["job"] = await measure_job(jobs, args.model, texts)
        progress("in-process sorted limit after the job")
        after = inprocess.run_baseline(model, texts, "length_sorted", args.inprocess_batch_size).as_dict()
        report["sorted_limit_texts_per_s"] = inprocess.bracketed(before, after)["embeddings_per_s"]
        report["sorted_limit_runs"] = [before["embeddings_per_s"], after["embeddings_per_s"]]
        duration, clients = args.duration or 30.0, args.job_clients
        progress(f"online alone: {clients} clients for {duration:g}s")
        report["online_alone"] = await online(target, args.model, clients, duration, args.timeout, seeds.alone)
        progress(f"online beside a job: {clients} clients for {duration:g}s")
        # Three times the idle job (within a batch file's default 50000 lines): enough to
        # outlast the measurement while online traffic runs.
        background = texts_of(min(args.job_texts * 3, 50_000), seeds.background)
        report["online_with_job"] = await online_beside_a_job(
            jobs, target, args.model, background, clients, duration, args.timeout, seeds.beside
        )
        report["concurrency"] = clients


def format_job_report(report: dict[str, Any]) -> str:
    job, limit = report["job"], report.get("sorted_limit_texts_per_s")
    quiet, busy = report["online_alone"], report["online_with_job"]
    lines = [
        "Bulk job",
        f"  idle server: {job['texts']} texts in {job['seconds']:.1f}s = {job['texts_per_s']:.1f} texts/s",
    ]
    if limit:
        lines.append(f"  sorted in-process limit: {limit:.1f} texts/s -> job/limit {job['texts_per_s'] / limit:.2f}x")
    lines += [
        f"Online, {report['concurrency']} clients, one sentence each:",
        f"  alone:          p50 {quiet['p50_ms']:.1f} ms, p99 {quiet['p99_ms']:.1f} ms, "
        f"{quiet['embeddings_per_s']:.1f}/s",
        f"  beside the job: p50 {busy['p50_ms']:.1f} ms, p99 {busy['p99_ms']:.1f} ms, "
        f"{busy['embeddings_per_s']:.1f}/s (the job meanwhile: {busy['job_texts_per_s']:.1f} texts/s)",
        f"  p99 beside the job / alone: {busy['p99_ms'] / max(quiet['p99_ms'], 1e-9):.2f}x",
    ]
    return "\n".join(lines)
