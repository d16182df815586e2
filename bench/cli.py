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
import os
import resource
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

from embedgate.converters import weights

from . import compare, inprocess, job, plot, processes, server_stats, sweep
from .connection import Target
from .endpoints import ENDPOINTS, build_endpoint
from .loadgen import LoadRun, run_load
from .payloads import PAYLOAD_KINDS, Payload, build_payload
from .report import format_summary, load_summary, machine, per_request, write_json

DEFAULT_URL = "http://127.0.0.1:8686"
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
LOAD_TIMEOUT_S = 1800
DEFAULT_DURATION_S = 30.0
# In-process inputs before a timed server run (the run after embeds what the server got).
_BEFORE_TEXTS = 4096
_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "::"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Load a running embedgate server and report its speed, optionally against the "
        "same model run in-process."
    )
    target = parser.add_argument_group("target")
    target.add_argument("--url", default=os.environ.get("EMBEDGATE_URL", DEFAULT_URL),
                        help=f"the server (default {DEFAULT_URL}) [env EMBEDGATE_URL]")
    target.add_argument("--model", default=DEFAULT_MODEL, help=f"model name (default {DEFAULT_MODEL})")
    target.add_argument("--pretrained", help="OpenCLIP pretrained tag or checkpoint (loads with /load_clip_model)")
    target.add_argument("--endpoint", choices=ENDPOINTS, default="/infer")
    target.add_argument("--no-load", action="store_true", help="do not load the model first")
    target.add_argument("--compare-model", metavar="MODEL",
                        help="then run the same benchmark against MODEL and compare (a variant such as "
                        "NAME@int8 against NAME)")
    target.add_argument("--api-key", default=os.environ.get("EMBEDGATE_API_KEY"),
                        help="bearer key sent with every request; an admin key when loading needs one "
                        "[env EMBEDGATE_API_KEY]")
    target.add_argument("--header", action="append", default=[], metavar="'NAME: VALUE'",
                        help="extra request header (repeatable)")

    load = parser.add_argument_group("load")
    load.add_argument("--payload", choices=PAYLOAD_KINDS, default="single",
                      help="single: one 8-30-token sentence per request; batch: --batch-size of them; "
                      "long: texts near the max length; image: JPEG data URIs (CLIP); file: lines of --input-file")
    load.add_argument("--batch-size", type=int, default=32,
                      help="inputs per request for batch, long, image and file (default 32)")
    load.add_argument("--input-file", type=Path, help="one input per line, for --payload file")
    load.add_argument("--image-size", type=int, default=256, help="image side in pixels (default 256)")
    load.add_argument("--concurrency", type=int, default=64, help="concurrent clients (default 64)")
    amount = load.add_mutually_exclusive_group()
    amount.add_argument("--requests", type=int, help="total requests to measure")
    amount.add_argument("--duration", type=float, help=f"seconds to measure (default {DEFAULT_DURATION_S:g})")
    load.add_argument("--warmup", type=float, default=5.0, help="seconds of unmeasured load first (default 5)")
    load.add_argument("--timeout", type=float, default=60.0, help="per-request timeout in seconds")
    load.add_argument("--seed", type=int, default=0, help="seed of the generated inputs")
    load.add_argument("--repeat", type=float, default=0.0, metavar="SHARE",
                      help="share of inputs (0-1) that repeat one of --hot-inputs popular inputs, as a response "
                           "cache meets them (default 0: every input is new)")
    load.add_argument("--hot-inputs", type=int, default=1000, help="popular inputs --repeat draws from (default 1000)")

    server = parser.add_argument_group("server processes (memory and CPU)")
    server.add_argument("--server-pid", type=int, action="append", default=[],
                        help="server PID (repeatable; descendants included). Default: the process "
                        "listening on --url's port, when it runs on this machine")
    server.add_argument("--sample-interval", type=float, default=0.5, help="memory sampling period (s)")

    baseline = parser.add_argument_group("in-process baseline")
    baseline.add_argument("--inprocess", action="store_true",
                          help="also embed the same inputs in-process with the served ONNX file")
    baseline.add_argument("--inprocess-only", action="store_true",
                          help="run only the in-process baselines (no server; needs --requests)")
    baseline.add_argument("--inprocess-batch-size", type=int, default=32)
    baseline.add_argument("--inprocess-threads", type=int,
                          help="onnxruntime intra-op threads (default: onnxruntime's, every core)")
    baseline.add_argument("--inprocess-max-texts", type=int,
                          help="embed at most this many of the inputs in-process (default: all)")
    baseline.add_argument("--model-repository",
                          help="the server's model repository, a directory or an s3:// URL (default: "
                          "EMBEDGATE_MODEL_REPOSITORY or model_repository)")

    sweep_group = parser.add_argument_group("load sweep (--sweep)")
    sweep_group.add_argument("--sweep", action="store_true",
                             help="measure single sentences and --batch-size-sentence requests at each of "
                                  "--sweep-clients, against in-process references, and print the table")
    sweep_group.add_argument("--sweep-clients", type=int, nargs="+", metavar="N",
                             help=f"client counts of the sweep (default {' '.join(map(str, sweep.DEFAULT_CLIENTS))})")
    sweep_group.add_argument("--plot", type=Path, metavar="PATH", help="also draw the sweep as an SVG chart")

    bulk = parser.add_argument_group("bulk jobs (--job)")
    bulk.add_argument("--job", action="store_true",
                      help="measure a bulk job instead: its rate on an idle server against the sorted in-process "
                      "limit, and online p50/p99 at --job-clients with and without a job running")
    bulk.add_argument("--job-texts", type=int, default=20000, help="texts of the idle-server job (default 20000)")
    bulk.add_argument("--job-clients", type=int, default=8, help="online clients beside the job (default 8)")

    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the report as JSON")
    return parser


def _validate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    for name in ("batch_size", "concurrency", "inprocess_batch_size", "image_size", "hot_inputs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if not 0 <= args.repeat <= 1:
        parser.error("--repeat must be between 0 and 1")
    if args.repeat and args.payload in ("image", "file"):
        parser.error("--repeat applies to generated text (the single, batch and long payloads)")
    if args.requests is not None and args.requests < 1:
        parser.error("--requests must be at least 1")
    if args.duration is not None and args.duration <= 0:
        parser.error("--duration must be positive")
    if args.sweep:
        if args.pretrained or args.payload not in ("single", "batch") or args.inprocess_only or args.job \
                or args.compare_model or args.requests is not None:
            parser.error("--sweep measures a sentence-transformer model by duration (no --pretrained, "
                         "--payload other than single or batch, --inprocess-only, --job, --compare-model or --requests)")
        if args.sweep_clients and min(args.sweep_clients) < 1:
            parser.error("--sweep-clients must be at least 1")
    elif args.sweep_clients or args.plot:
        parser.error("--sweep-clients and --plot go with --sweep")
    if args.inprocess_only and args.requests is None:
        parser.error("--inprocess-only needs --requests (how many requests' inputs to embed)")
    if (args.inprocess or args.inprocess_only) and (args.payload == "image" or args.pretrained):
        parser.error("the in-process baseline covers sentence-transformer models (no --payload image or --pretrained)")
    if args.endpoint != "/infer" and args.payload == "image":
        parser.error("--payload image needs --endpoint /infer")
    if args.payload == "file" and args.input_file is None:
        parser.error("--payload file needs --input-file")
    if args.compare_model and (args.inprocess_only or args.pretrained or args.compare_model == args.model):
        parser.error("--compare-model needs a server run of a sentence-transformer model and another model")
    for header in args.header:
        if ":" not in header:
            parser.error(f"--header {header!r} is not 'NAME: VALUE'")
    if args.requests is None and args.duration is None:
        args.duration = DEFAULT_DURATION_S


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _server_roots(url: str, pids: list[int]) -> list[int]:
    if pids:
        return pids
    parts = urlsplit(url)
    host = parts.hostname or ""
    if host not in _LOCAL_HOSTS and not host.startswith("127."):
        return []
    return processes.listening_pids(parts.port or (443 if parts.scheme == "https" else 80))


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
        endpoint = build_endpoint(args.endpoint, args.model, args.pretrained)
        target = Target.from_url(args.url, headers)
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
            warm = await run_load(target, endpoint, payload, concurrency=args.concurrency,
                                  timeout_s=args.timeout, duration_s=args.warmup)
            first_index = len(warm.records)

        counters_before = await server_stats.read_settled_counters(session, args.url, serves)
        procs_before = processes.sample(roots) if roots else []
        client_before = resource.getrusage(resource.RUSAGE_SELF)
        amount = f"{args.requests} requests" if args.requests else f"{args.duration:g}s"
        _progress(f"measuring: {amount}, {args.concurrency} clients, {args.payload} payload")
        run = await run_load(
            target, endpoint, payload, concurrency=args.concurrency, timeout_s=args.timeout,
            first_index=first_index, requests=args.requests, duration_s=args.duration,
        )
        client_after = resource.getrusage(resource.RUSAGE_SELF)
        procs_after = processes.sample(roots) if roots else []
        if watch:
            await watch.stop()
        counters_after = await server_stats.read_settled_counters(session, args.url, serves)

    report["load"] = load_summary(run)
    report["triton"] = server_stats.batching_delta(counters_before, counters_after)
    cpu = processes.cpu_by_role(procs_before, procs_after) if roots else {}
    cpu["client"] = (client_after.ru_utime + client_after.ru_stime) - (client_before.ru_utime + client_before.ru_stime)
    report["cpu_ms_per_request"] = per_request(cpu, len(run.records))
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
    from embedgate.converters.repository import RepositoryError, open_repository

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
        "requests": args.requests,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "seed": args.seed,
        "repeat": args.repeat,
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
    _validate(parser, args)
    report: dict = {"config": _config(args), "machine": machine()}
    if args.job:
        _run_loop(job.run(args, report, load_model=_load_model, open_model=_open_model, progress=_progress))
        print(job.format_job_report(report))
        if args.json:
            write_json(report, args.json)
        return

    if args.sweep:
        _run_loop(sweep.run(args, report, server_run=_server_run, open_model=_open_model, progress=_progress))
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
        if args.compare_model:
            other_args = argparse.Namespace(**{**vars(args), "model": args.compare_model})
            report["compare"] = {"config": _config(other_args)}
            _measure_server(other_args, report["compare"])
            report["comparison"] = compare.comparison(report, report["compare"])

    print(format_summary(report))
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
