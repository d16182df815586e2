"""The ``embedgate`` command line.

``embedgate serve`` takes a flag for every setting (``--max-batch-size 32`` sets
``max_batch_size``); flags win over ``EMBEDGATE_*`` environment variables.
"""

from __future__ import annotations

import argparse
import logging
import sys
import typing

from .settings import Settings


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
    return Settings(**overrides)


def serve(settings: Settings) -> None:
    import uvicorn

    from .app import create_app

    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        loop="uvloop",
        http="httptools",
        access_log=False,
        timeout_graceful_shutdown=10,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="embedgate", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    serve_parser = commands.add_parser("serve", help="start Triton and the gateway")
    add_settings_flags(serve_parser)
    args = parser.parse_args(argv)
    if args.command == "serve":
        serve(settings_from_args(args))


if __name__ == "__main__":
    main(sys.argv[1:])
