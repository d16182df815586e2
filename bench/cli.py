"""``benchmark.py`` / ``embedgate bench``: load a running embedgate server and report.

A run loads the model through the API (converting it on first use), warms up, then
measures: latency and throughput as clients see them, Triton's batching from
``/metrics``, the server's CPU per request and peak memory from /proc (when the server
runs on this machine), and, with ``--inprocess``, the same inputs embedded in-process by
the very ONNX file the server serves.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp

try:  # uvloop (with uvicorn[standard] on Linux): the clients take less CPU from the server.
    from uvloop import run as _run_loop
except ImportError:  # pragma: no cover - other platforms
    _run_loop = asyncio.run

from embedgate.bench import (
    compare, inprocess, job, plot, processes, served_model, server_stats, stages, sweep, transports,
)
from embedgate.bench.connection import Target
from embedgate.bench.endpoints import build_endpoint
from embedgate.bench.grpc_endpoints import GRPC_ENDPOINTS, build_grpc_endpoint
from embedgate.bench.loadgen import LoadRun, run_load_split
from embedgate.bench.options import build_parser, validate
from embedgate.bench.payloads import Payload, build_payload
from embedgate.bench.report import format_summary, load_summary, machine, per_request, write_json
from embedgate.converters import weights

LOAD_TIMEOUT_S = 1800
# In-process inputs before a timed server run (the run after embeds what the server got).
_BEFORE_TEXTS = 4096
_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "::"}


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _server_roots(url: str, pids: list[int]) -> list[int]:
    if pids:
        return pids
    parts = urlsplit(url)
    host = parts.hostname or ""
    if host not in _LOCAL_HOSTS and not host.startswith("127."):
        return []
    return processes.server_roots(parts.port or (443 if parts.scheme == "https" else 80))


def _payload(args: argparse.Namespace, max_length: int | None) -> Payload:
    try:
        return build_payload(
            args.payload, batch_size=args.batch_size, seed=args.seed, max_length=max_length,
            input_file=args.input_file, image_size=args.image_size, repeat=args.repeat,
            hot_inputs=args.hot_inputs,
        )
    except (OSError, ValueError) as exc:
        raise SystemExit(f"payload {args.payload}: {exc}") from None


async def _load_model(session: aiohttp.ClientSession, args: argparse.Namespace) -> dict:
    if args.pretrained:
        path, body = "/load_clip_model", {"model_name": args.model, "pretrained": args.pretrained}
    else:
        path, body = "/load_sentence_transformer_model", {"model_name": args.model}
        if args.model_path:
            body["model_path"] = args.model_path
    _progress(f"loading {args.model} (converted on first use; may take a while)")
    try:
        async with session.post(
            args.url.rstrip("/") + path, json=body, timeout=aiohttp.ClientTimeout(total=LOAD_TIMEOUT_S)
        ) as response:
            status, text = response.status, await response.text()
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        raise SystemExit(f"cannot load {args.model} from {args.url}: {exc or type(exc).__name__}") from None
    if status != 200:
        raise SystemExit(f"loading {args.model} failed ({status}): {text}")
    return json.loads(text)


async def _max_length(session: aiohttp.ClientSession, args: argparse.Namespace) -> int | None:
    async with session.get(args.url.rstrip("/") + "/loaded_models") as response:
        if response.status != 200:
            return None
        models = (await response.json()).get("models", [])
    return next((m.get("max_seq_length") for m in models if m.get("model_name") == args.model), None)


async def _server_run(
    args: argparse.Namespace, report: dict, before_load: Callable[[Payload], None] | None = None
) -> tuple[Payload, LoadRun]:
    """Load the model, then put the server under load. ``before_load`` runs once the model
    is published and before any load (the first in-process baseline)."""
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    headers.update((name.strip(), value.strip()) for name, value in (h.split(":", 1) for h in args.header))
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
        loaded = {} if args.no_load else await _load_model(session, args)
        report["model"] = {key: loaded.get(key) for key in ("variant", "parity_min_cosine") if key in loaded}
        max_length = loaded.get("max_seq_length")
        if args.payload == "long" and not max_length:
            max_length = await _max_length(session, args)
        payload = _payload(args, max_length)
        target = Target.from_url(args.url, headers)
        if args.endpoint in GRPC_ENDPOINTS:
            endpoint = build_grpc_endpoint(args.endpoint, target.host, args.grpc_port, args.model, args.api_key)
        else:
            endpoint = build_endpoint(args.endpoint, args.model, args.pretrained)
        serves = server_stats.serves(args.model, args.pretrained)
        if before_load is not None:
            before_load(payload)

        roots = _server_roots(args.url, args.server_pid)
        watch = processes.MemoryWatch(roots, args.sample_interval) if roots else None
        if watch:
            watch.start()
        first_index = 0
        if args.warmup > 0:
            _progress(f"warming up for {args.warmup:g}s with {args.concurrency} clients")
            warm = await run_load_split(
                args.load_processes, target=target, endpoint=endpoint, payload=payload,
                concurrency=args.concurrency, timeout_s=args.timeout, duration_s=args.warmup,
                honor_retry_after=args.honor_retry_after,
            )
            first_index = max((r.index for r in warm.run.records), default=-1) + 1

        counters_before = await server_stats.read_settled_counters(session, args.url, serves)
        procs_before = processes.sample(roots) if roots else []
        profile = stages.StageProfile(roots) if args.profile and roots else None
        if profile is not None:
            profile.start()
        amount = f"{args.requests} requests" if args.requests else f"{args.duration:g}s"
        generators = f" from {args.load_processes} processes" if args.load_processes > 1 else ""
        _progress(f"measuring: {amount}, {args.concurrency} clients{generators}, {args.payload} payload")
        split = await run_load_split(
            args.load_processes, target=target, endpoint=endpoint, payload=payload, concurrency=args.concurrency,
            timeout_s=args.timeout, first_index=first_index, requests=args.requests, duration_s=args.duration,
            honor_retry_after=args.honor_retry_after,
        )
        run = split.run
        procs_after = processes.sample(roots) if roots else []
        sampled = profile.stop() if profile is not None else None
        if watch:
            await watch.stop()
        counters_after = await server_stats.read_settled_counters(session, args.url, serves)

    report["load"] = load_summary(run)
    report["triton"] = server_stats.batching_delta(counters_before, counters_after)
    cpu = processes.cpu_by_role(procs_before, procs_after) if roots else {}
    cpu["client"] = split.client_cpu_s
    report["cpu_ms_per_request"] = per_request(cpu, len(run.records))
    by_process = processes.cpu_by_process(procs_before, procs_after) if roots else {}
    if sampled is not None:
        report["cpu_ms_per_request_by_stage"] = stages.cpu_per_stage(sampled, procs_before, procs_after, len(run.records))
    if any(label.startswith("gateway worker") for label in by_process):
        report["cpu_ms_per_request_by_process"] = per_request(by_process, len(run.records))
    if watch:
        report["memory"] = {
            "kind": watch.memory_kind,
            "peak_mb": round(watch.peak_kb / 1024, 1),
            "peak_by_role_mb": {role: round(kb / 1024, 1) for role, kb in sorted(watch.peak_by_role_kb.items())},
            "pids": sorted(watch.pids),
        }
    return payload, run


def _open_model(args: argparse.Namespace) -> inprocess.LocalModel:
    from embedgate.api.models.names import to_triton_name
    from embedgate.api.settings import Settings
    from embedgate.contract.repository import RepositoryError, open_repository

    settings = Settings()
    try:
        repository = open_repository(args.model_repository or settings.model_repository, settings.repository_cache)
        root = Path(repository.location)
        if repository.remote:
            # The served ONNX file, downloaded for this run only.
            root = Path(tempfile.mkdtemp(prefix="embedgate-bench-"))
            atexit.register(shutil.rmtree, root, True)
            name = to_triton_name(args.model)
            repository.fetch(name, into=root / name)
        return inprocess.open_local_model(root, args.model, args.inprocess_threads)
    except (FileNotFoundError, ValueError, RepositoryError) as exc:
        raise SystemExit(f"in-process baseline: {exc}") from None


def _baselines(model: inprocess.LocalModel, args: argparse.Namespace, texts: list[str], when: str) -> dict:
    if args.inprocess_max_texts:
        texts = texts[: args.inprocess_max_texts]
    if not texts:
        raise SystemExit("in-process baseline: no inputs to embed")
    inprocess.warm_up(model, texts, args.inprocess_batch_size)
    baselines = {}
    for strategy in inprocess.STRATEGIES:
        _progress(f"in-process {strategy}{when}: {len(texts)} texts in batches of {args.inprocess_batch_size}")
        baselines[strategy] = inprocess.run_baseline(model, texts, strategy, args.inprocess_batch_size).as_dict()
    return baselines


def _inprocess(
    model: inprocess.LocalModel, args: argparse.Namespace, texts: list[str], report: dict, before: dict | None = None
) -> None:
    baselines = _baselines(model, args, texts, " after the server run" if before else "")
    if before:
        # The machine's speed drifts: the limit is the mean of a run before the server's and one after.
        baselines = {strategy: inprocess.bracketed(before[strategy], after) for strategy, after in baselines.items()}
    result: dict = {
        "onnx_file": str(model.onnx_path),
        "onnx_mb": round(weights.size_bytes(model.onnx_path) / 1e6, 1),
        "intra_op_threads": model.intra_op_threads,
        "baselines": baselines,
    }
    load = report.get("load")
    if load and load["embeddings_per_s"]:
        result["server_ratio"] = {
            strategy: round(load["embeddings_per_s"] / b["embeddings_per_s"], 4)
            for strategy, b in baselines.items()
        }
    report["inprocess"] = result


def _config(args: argparse.Namespace) -> dict:
    return {
        "url": args.url,
        "endpoint": args.endpoint,
        "model": args.model,
        "payload": args.payload,
        "per_request": 1 if args.payload == "single" else args.batch_size,
        "concurrency": args.concurrency,
        "load_processes": args.load_processes,
        "requests": args.requests,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "seed": args.seed,
        "repeat": args.repeat,
        "honor_retry_after": args.honor_retry_after,
        "hot_inputs": args.hot_inputs if args.repeat else None,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _measure_server(args: argparse.Namespace, report: dict) -> None:
    if not args.inprocess:
        _run_loop(_server_run(args, report))
        return
    model: inprocess.LocalModel | None = None
    before: dict = {}

    def baseline_before(payload: Payload) -> None:
        nonlocal model
        # The model is published by now (a server converts it on first load).
        model = _open_model(args)
        if args.requests:
            texts = [t for i in range(args.requests) for t in payload.inputs(i)]
        else:  # as many inputs as the run after will embed, about
            count, texts = args.inprocess_max_texts or _BEFORE_TEXTS, []
            while len(texts) < count:
                texts.extend(payload.inputs(len(texts)))
        before.update(_baselines(model, args, texts, " before the server run"))

    payload, run = _run_loop(_server_run(args, report, baseline_before))
    # The inputs the server got, in the order they were sent.
    texts = [t for record in run.records for t in payload.inputs(record.index)]
    assert model is not None  # baseline_before ran before the load
    _inprocess(model, args, texts, report, before)


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    validate(parser, args)
    report: dict = {"config": _config(args), "machine": machine()}
    if args.job:
        _run_loop(job.run(args, report, load_model=_load_model, open_model=_open_model, progress=_progress))
        print(job.format_job_report(report))
        if args.json:
            write_json(report, args.json)
        return

    if args.sweep:
        _run_loop(sweep.run(
            args, report, server_run=_server_run, open_model=_open_model, progress=_progress,
            measure_served=served_model.core_ms_per_text, cores=report["machine"]["cpus"],
        ))
        print(sweep.format_sweep(report))
        if args.plot:
            args.plot.write_text(plot.sweep_svg(report))
            _progress(f"chart written to {args.plot}")
        if args.json:
            write_json(report, args.json)
        return

    if args.inprocess_only:
        model = _open_model(args)
        payload = _payload(args, model.metadata.max_seq_length)
        _inprocess(model, args, [t for i in range(args.requests) for t in payload.inputs(i)], report)
    else:
        _measure_server(args, report)
        if args.compare_endpoints:
            report["side_by_side"] = transports.run(args, report, _measure_server, _config)
        if args.compare_model:
            other_args = argparse.Namespace(**{**vars(args), "model": args.compare_model})
            report["compare"] = {"config": _config(other_args)}
            _measure_server(other_args, report["compare"])
            report["comparison"] = compare.comparison(report, report["compare"])

    print(format_summary(report))
    if args.compare_endpoints:
        for other in report["side_by_side"]["runs"]:
            print("\n" + format_summary(other))
        print(transports.format_side_by_side(report["side_by_side"]))
    if args.compare_model:
        print(compare.format_comparison(report))
    if args.json:
        write_json(report, args.json)
        _progress(f"report written to {args.json}")
    load = report.get("load")
    if load and load["cached_inputs"] and not args.repeat:
        _progress(
            f"note: the server answered {load['cached_inputs']} inputs from its response cache: it saw them "
            "before (a run with the same --seed); use another --seed, or a server with "
            "EMBEDGATE_RESPONSE_CACHE_MB=0, to measure the model"
        )
    if load is not None and load["successful_requests"] == 0:
        raise SystemExit("no request succeeded: " + ", ".join(f"{k}: {v}" for k, v in load["errors"].items()))


if __name__ == "__main__":
    main()
