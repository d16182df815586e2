"""A gateway worker process: ``python -m embedgate.api.workers.worker``, started by the
primary (``pool.py``) with the server's port, the primary's control socket and its
settings on standard input. It serves the same app as a single gateway
(``create_app``), with the primary as its cluster (``cluster.py``)."""

from __future__ import annotations

import argparse
import logging
import sys

from ..settings import Settings

WORKER_HEADER = b"x-embedgate-worker"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="embedgate-worker")
    parser.add_argument("--port", type=int, required=True, help="the server's port (listened on beside the others)")
    parser.add_argument("--control", required=True, help="the primary's control socket")
    parser.add_argument("--index", type=int, required=True)
    args = parser.parse_args(argv)
    settings = Settings.model_validate_json(sys.stdin.read())

    import uvicorn

    from .. import collector
    from ..grpc import grpc_faces
    from ..http.app import create_app
    from ..http.middleware import ServedBy
    from ..http.server import uvicorn_options
    from .cluster import WorkerCluster
    from .sockets import worker_socket

    logging.basicConfig(
        level=settings.log_level.upper(),
        format=f"%(asctime)s %(levelname)s %(name)s [worker {args.index}]: %(message)s",
    )
    sock = worker_socket(settings.host, args.port)
    # Every worker serves the gRPC port too (SO_REUSEPORT), as it serves the HTTP one.
    app = create_app(settings, cluster=WorkerCluster(settings, args.control, args.index),
                     faces=grpc_faces(settings, shared_port=True))
    app.add_middleware(ServedBy, header=WORKER_HEADER, value=str(args.index))
    collector.settle()
    config = uvicorn.Config(app, **uvicorn_options(settings.log_level))
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
