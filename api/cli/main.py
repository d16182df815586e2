"""The ``embedgate`` command line.

``embedgate serve`` takes a flag for every setting (``--max-batch-size 32`` sets
``max_batch_size``); flags win over ``EMBEDGATE_*`` environment variables. ``load``,
``unload``, ``delete``, ``models``, ``embed``, ``rerank`` and ``batch`` talk to a running
server over HTTP; ``bench`` runs the benchmark (``bench/``) with the arguments that follow it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import typing
from pathlib import Path

import httpx
from pydantic import ValidationError

from ..settings import Settings
from . import batch
from .client import DEFAULT_URL, EmbedgateClient, ServerError


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_settings_flags(parser: argparse.ArgumentParser) -> None:
    for name, field in Settings.model_fields.items():
        annotation = field.annotation
        help_text = (field.description or "") + f" [env EMBEDGATE_{name.upper()}]"
        if annotation is bool:
            parser.add_argument(_flag(name), dest=name, action=argparse.BooleanOptionalAction,
                                default=None, help=help_text)
        elif typing.get_origin(annotation) is list or name == "preload_models":
            parser.add_argument(_flag(name), dest=name, action="append", default=None,
                                help=help_text + " (repeatable)")
        else:
            parser.add_argument(_flag(name), dest=name, default=None, help=help_text)


def settings_from_args(args: argparse.Namespace) -> Settings:
    overrides = {
        name: getattr(args, name)
        for name in Settings.model_fields
        if getattr(args, name, None) is not None
    }
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        # The message names the setting and why, never its value (some are secrets).
        raise SystemExit(f"embedgate: invalid settings: {exc}") from None


def serve(settings: Settings) -> None:
    import uvicorn

    from .. import collector
    from ..grpc import grpc_faces
    from ..http.app import create_app
    from ..http.server import uvicorn_options
    from ..workers import primary
    from ..workers.pool import worker_count

    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    workers = worker_count(settings)
    if workers > 1:
        primary.serve(settings, workers)
        return
    app = create_app(settings, faces=grpc_faces(settings, shared_port=False))
    collector.settle()
    uvicorn.run(app, host=settings.host, port=settings.port, **uvicorn_options(settings.log_level))


def _client_options() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--url", default=os.environ.get("EMBEDGATE_URL", DEFAULT_URL),
                         help=f"the server (default {DEFAULT_URL}) [env EMBEDGATE_URL]")
    options.add_argument("--api-key", default=os.environ.get("EMBEDGATE_API_KEY"),
                         help="bearer key; an admin key for load, unload and delete when the "
                         "server has admin keys [env EMBEDGATE_API_KEY]")
    options.add_argument("--timeout", type=float, default=60.0,
                         help="seconds to wait for an answer (a load waits as long as the server works)")
    return options


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="embedgate", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    serve_parser = commands.add_parser("serve", help="start Triton and the gateway")
    serve_parser.add_argument("--ray", action="store_true",
                              help="run as a Ray Serve application of replicas, each with its own Triton "
                              "(the --ray-* settings)")
    add_settings_flags(serve_parser)
    runtime = commands.add_parser(
        "triton-runtime", help="give the embedded Triton an environment of its own (nvidia-pytriton, numpy 1), "
        "once at install time, where this one has numpy 2 or no nvidia-pytriton",
    )
    runtime.add_argument("--dir", type=Path, help="where (default: ~/.cache/embedgate/triton-runtime-pyX.Y, "
                         "found there by `embedgate serve`; elsewhere, set EMBEDGATE_TRITON_STUB_PYTHON)")
    runtime.add_argument("--find-links", action="append", default=[], metavar="DIR_OR_URL",
                         help="also look for the wheels there (pip's --find-links)")
    runtime.add_argument("--no-index", action="store_true", help="only --find-links, no package index")
    client = [_client_options()]

    clip = argparse.ArgumentParser(add_help=False)
    clip.add_argument("--pretrained", help="an OpenCLIP model's pretrained weights (tag, checkpoint path, or a "
                      "hub repository as hf-hub:org/name)")

    load = commands.add_parser("load", parents=[*client, clip], help="load a model, converting it first "
                               "if needed; shows the server's progress")
    load.add_argument("model_name", metavar="MODEL")
    load.add_argument("--model-path", help="a sentence-transformers model's directory on the server")
    load.add_argument("--trust-remote-code", action="store_true",
                      help="run the model's own code (the server must allow it)")
    load.add_argument("--optimize", action="store_true",
                      help="load the variant MODEL@optimized (graph fused by onnxruntime)")
    load.add_argument("--quantize", choices=["int8"],
                      help="load the variant MODEL@int8 (dynamic int8 quantization)")
    load.add_argument("--revision", help="the hub's branch, tag or commit of a model from the hub (default: main)")
    load.add_argument("--refuse-source-change", action="store_true",
                      help="fail (409 source_changed) instead of converting again when the repository's copy "
                      "was converted from another source than this load names")
    load.add_argument("--quiet", action="store_true", help="no progress lines")
    for name, what in (("unload", "unload a model (it stays in the repository)"),
                       ("delete", "unload a model and remove it from the repository")):
        commands.add_parser(name, parents=[*client, clip], help=what).add_argument("model_name", metavar="MODEL")

    models = commands.add_parser("models", parents=client, help="list the loaded models")
    models.add_argument("--all", action="store_true", help="every model in the repository, loaded or not")
    models.add_argument("--json", action="store_true", help="print JSON instead of a table")

    embed = commands.add_parser("embed", parents=[*client, clip],
                                help="print embeddings of the texts given, one JSON array per line")
    embed.add_argument("model_name", metavar="MODEL")
    embed.add_argument("texts", nargs="+", metavar="TEXT")
    embed.add_argument("--no-normalize", dest="normalize", action="store_false",
                       help="raw vectors instead of unit length")
    embed.add_argument("--prompt-name", help="the model's prompt of this name goes before every text")
    embed.add_argument("--precision", default="float32", choices=["float32", "int8", "uint8", "binary", "ubinary"],
                       help="dense embeddings in this precision (as sentence-transformers' quantize_embeddings)")
    embed.add_argument("--timings", action="store_true", help="print the server's timing headers to stderr")

    rerank = commands.add_parser("rerank", parents=client,
                                 help="score documents against a query with a cross-encoder; best first")
    rerank.add_argument("model_name", metavar="MODEL")
    rerank.add_argument("query", metavar="QUERY")
    rerank.add_argument("documents", nargs="+", metavar="DOCUMENT")
    rerank.add_argument("--top-n", type=int, help="only the best N")
    rerank.add_argument("--timings", action="store_true", help="print the server's timing headers to stderr")

    batch.add_parser(commands, client)

    # Listed for --help; main() hands every argument after "bench" to the benchmark as is.
    commands.add_parser("bench", add_help=False, help="run the benchmark against a server "
                        "(embedgate bench --help)")
    return parser


def _show_progress(event: dict) -> None:
    print(f"[{event['elapsed_s']:6.1f}s] {event['message']}", file=sys.stderr, flush=True)


def _load(client: EmbedgateClient, args: argparse.Namespace) -> None:
    result = client.load(
        args.model_name,
        args.model_path,
        pretrained=args.pretrained,
        trust_remote_code=args.trust_remote_code,
        optimize=args.optimize,
        quantize=args.quantize,
        revision=args.revision,
        on_source_change="refuse" if args.refuse_source_change else None,
        on_progress=None if args.quiet else _show_progress,
    )
    print(json.dumps(result))


def _unload(client: EmbedgateClient, args: argparse.Namespace) -> None:
    print(client.unload(args.model_name, args.pretrained)["message"])


def _delete(client: EmbedgateClient, args: argparse.Namespace) -> None:
    print(client.delete(args.model_name, args.pretrained)["message"])


def _models(client: EmbedgateClient, args: argparse.Namespace) -> None:
    models = client.models(include_unloaded=args.all)
    if args.json:
        print(json.dumps(models))
        return
    rows = [("MODEL", "PRETRAINED", "KIND", "DIM", "MAX_LEN", "FORM", "LOADED")] + [
        (m["model_name"], m.get("pretrained") or "-", m["kind"], str(m["embedding_dim"]),
         str(m["max_seq_length"]), m["form"], "yes" if m["loaded"] else "no")
        for m in models
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


def _embed(client: EmbedgateClient, args: argparse.Namespace) -> None:
    rows, timings = client.embed(
        args.model_name,
        args.texts,
        pretrained=args.pretrained,
        normalize=args.normalize,
        prompt_name=args.prompt_name,
        precision=args.precision,
    )
    for row in rows:
        print(json.dumps(row))
    _show_timings(args, timings)


def _rerank(client: EmbedgateClient, args: argparse.Namespace) -> None:
    results, timings = client.rerank(args.model_name, args.query, args.documents, top_n=args.top_n)
    for result in results:
        print(f"{result['relevance_score']:.6f}\t{result['index']}\t{result['document']['text']}")
    _show_timings(args, timings)


def _show_timings(args: argparse.Namespace, timings: dict[str, str]) -> None:
    if args.timings:
        print(" ".join(f"{k}={v}" for k, v in sorted(timings.items())), file=sys.stderr)


CLIENT_COMMANDS = {
    "load": _load, "unload": _unload, "delete": _delete, "models": _models, "embed": _embed, "rerank": _rerank,
}


def bench(argv: list[str]) -> int:
    # Imported here: the benchmark pulls in onnxruntime, which no other command needs.
    from embedgate.bench.cli import main as run_benchmark

    run_benchmark(argv)
    return 0


def triton_runtime(args: argparse.Namespace) -> int:
    from ..triton import runtime

    try:
        python = runtime.create(args.dir, find_links=args.find_links, no_index=args.no_index)
        print(f"embedgate: Triton's environment is ready: {python.parent.parent} ({runtime.describe(python)})")
    except runtime.RuntimeFailed as exc:
        print(f"embedgate: {exc}", file=sys.stderr)
        return 1
    if args.dir is not None and python.parent.parent != runtime.default_runtime():
        print(f"embedgate: serve with EMBEDGATE_TRITON_STUB_PYTHON={python}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:
        return bench(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "serve" and args.ray:
        from ..ray_serve.launch import run

        settings = settings_from_args(args)
        if settings.workers > 1:
            raise SystemExit(
                "embedgate: --workers runs gateway processes on one machine; with --ray each replica is one "
                "gateway process: scale with --ray-replicas"
            )
        run(settings)
        return 0
    if args.command == "serve":
        serve(settings_from_args(args))
        return 0
    if args.command == "triton-runtime":
        return triton_runtime(args)
    try:
        with EmbedgateClient(args.url, args.api_key, args.timeout) as client:
            if args.command == "batch":
                return batch.run(client, args)
            CLIENT_COMMANDS[args.command](client, args)
    except ServerError as exc:
        print(f"embedgate: {exc.status} {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    except httpx.HTTPError as exc:
        print(f"embedgate: could not talk to {args.url}: {exc or type(exc).__name__}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
