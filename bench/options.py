"""The benchmark's command line: its options, and what it refuses before touching any server."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from embedgate.bench.endpoints import ENDPOINTS
from embedgate.bench.grpc_endpoints import GRPC_ENDPOINTS
from embedgate.bench.payloads import PAYLOAD_KINDS
from embedgate.bench.sweep import DEFAULT_CLIENTS, LIMIT_TEXTS

DEFAULT_URL = "http://127.0.0.1:8686"
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_DURATION_S = 30.0


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
    target.add_argument("--model-path", metavar="DIR",
                        help="load --model from this directory on the server's machine (a model built with "
                             "python -m embedgate.bench.random_models, say)")
    target.add_argument("--endpoint", choices=(*ENDPOINTS, *GRPC_ENDPOINTS), default="/infer",
                        help="grpc: TEI's gRPC Embed, one unary call per input; grpc-stream: each client's "
                        "inputs on one long-lived EmbedStream (both on --grpc-port)")
    target.add_argument("--compare-endpoints", nargs="+", default=[], metavar="ENDPOINT",
                        choices=(*ENDPOINTS, *GRPC_ENDPOINTS),
                        help="then run the same benchmark against each of these endpoints and print them side "
                        "by side with --endpoint (their throughput, latency and the gateway's CPU per request)")
    target.add_argument("--grpc-port", type=int, default=int(os.environ.get("EMBEDGATE_GRPC_PORT") or 50051),
                        help="the server's gRPC port, on --url's host, for --endpoint grpc and grpc-stream "
                        "(default 50051) [env EMBEDGATE_GRPC_PORT]")
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
    load.add_argument("--load-processes", type=int, default=1, metavar="K",
                      help="generate the load from K processes, the clients split between them (default 1: "
                      "this one); one Python process sends at most a few thousand requests/s")
    load.add_argument("--warmup", type=float, default=5.0, help="seconds of unmeasured load first (default 5)")
    load.add_argument("--timeout", type=float, default=60.0, help="per-request timeout in seconds")
    load.add_argument("--seed", type=int, default=0, help="seed of the generated inputs")
    load.add_argument("--honor-retry-after", action="store_true",
                      help="a client refused with a Retry-After waits that long before its next request "
                           "(default: it sends the next at once)")
    load.add_argument("--repeat", type=float, default=0.0, metavar="SHARE",
                      help="share of inputs (0-1) that repeat one of --hot-inputs popular inputs, as a response "
                           "cache meets them (default 0: every input is new)")
    load.add_argument("--hot-inputs", type=int, default=1000, help="popular inputs --repeat draws from (default 1000)")

    server = parser.add_argument_group("server processes (memory and CPU)")
    server.add_argument("--server-pid", type=int, action="append", default=[],
                        help="server PID (repeatable; descendants included). Default: the process "
                        "listening on --url's port, when it runs on this machine")
    server.add_argument("--sample-interval", type=float, default=0.5, help="memory sampling period (s)")
    server.add_argument("--profile", action="store_true",
                        help="sample the server's Python processes with py-spy over the measured window and "
                        "report CPU per request by stage (needs py-spy, and a server on this machine)")

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
                             help=f"client counts of the sweep (default {' '.join(map(str, DEFAULT_CLIENTS))})")
    sweep_group.add_argument("--sweep-limit-texts", type=int, default=LIMIT_TEXTS, metavar="N",
                             help=f"single sentences the sorted in-process limit embeds, before the sweep and "
                                  f"after it (default {LIMIT_TEXTS})")
    sweep_group.add_argument("--plot", type=Path, metavar="PATH", help="also draw the sweep as an SVG chart")

    bulk = parser.add_argument_group("bulk jobs (--job)")
    bulk.add_argument("--job", action="store_true",
                      help="measure a bulk job instead: its rate on an idle server against the sorted in-process "
                      "limit, and online p50/p99 at --job-clients with and without a job running")
    bulk.add_argument("--job-texts", type=int, default=20000, help="texts of the idle-server job (default 20000)")
    bulk.add_argument("--job-clients", type=int, default=8, help="online clients beside the job (default 8)")

    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the report as JSON")
    return parser


def validate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    for name in ("batch_size", "concurrency", "inprocess_batch_size", "image_size", "hot_inputs", "load_processes"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.model_path and (args.pretrained or args.compare_model or args.no_load):
        parser.error("--model-path loads a sentence-transformer model (no --pretrained, --compare-model or --no-load)")
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
        if args.sweep_limit_texts < 1:
            parser.error("--sweep-limit-texts must be at least 1")
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
    if args.compare_endpoints and (args.compare_model or args.inprocess_only or args.sweep or args.job
                                   or args.payload == "image"):
        parser.error("--compare-endpoints compares text runs of one model (no --compare-model, --inprocess-only, "
                     "--sweep, --job or --payload image)")
    if args.compare_model and (args.inprocess_only or args.pretrained or args.compare_model == args.model):
        parser.error("--compare-model needs a server run of a sentence-transformer model and another model")
    for header in args.header:
        if ":" not in header:
            parser.error(f"--header {header!r} is not 'NAME: VALUE'")
    if args.requests is None and args.duration is None:
        args.duration = DEFAULT_DURATION_S
