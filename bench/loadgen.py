"""The load generator: ``concurrency`` asyncio clients, each sending its next request as
soon as its last one is answered (a closed loop), each on its own keep-alive connection
(``connection.py``).

Asyncio rather than threads: one thread drives every client, so the generator is not
limited by the GIL and takes little of the CPU the server under test needs.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import orjson

from embedgate.bench.connection import Connection, Response, Target
from embedgate.bench.endpoints import Endpoint
from embedgate.bench.payloads import Payload


@dataclass
class RequestRecord:
    index: int
    inputs: int
    latency_s: float
    # "200", another HTTP status, "timeout", "connection_error", or "bad_response" (a 200
    # whose body is not the expected shape or carries the wrong number of embeddings).
    status: str
    embeddings: int = 0
    server_ms: float | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
    zero_vectors: bool = False
    cached: int = 0  # inputs answered from the server's response cache
    retry_after_s: float | None = None  # a refusal's Retry-After

    @property
    def ok(self) -> bool:
        return self.status == "200"


@dataclass
class LoadRun:
    records: list[RequestRecord]
    wall_s: float
    concurrency: int

    @property
    def succeeded(self) -> list[RequestRecord]:
        return [r for r in self.records if r.ok]


class Client:
    """One simulated user: its own keep-alive connection, one request at a time, a new
    connection after a timeout or a broken one."""

    def __init__(self, target: Target, timeout_s: float):
        self.target = target
        self.timeout_s = timeout_s
        self.connection: Connection | None = None

    async def post(self, head: bytes, body: bytes) -> Response:
        try:
            async with asyncio.timeout(self.timeout_s):
                if self.connection is None or self.connection.closed:
                    self.connection = await Connection.open(self.target)
                return await self.connection.post(head, body)
        except BaseException:
            self.close()  # a late answer must not be read as the next request's
            raise

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None


async def send_one(client: Client, head: bytes, endpoint: Endpoint, payload: Payload, index: int) -> RequestRecord:
    inputs = payload.inputs(index)
    body = endpoint.body(inputs, payload.kind)
    started = time.perf_counter()
    try:
        response = await client.post(head, body)
    except TimeoutError:
        return RequestRecord(index, len(inputs), time.perf_counter() - started, "timeout")
    except OSError:  # ConnectionError included
        return RequestRecord(index, len(inputs), time.perf_counter() - started, "connection_error")
    latency = time.perf_counter() - started
    if response.status != 200:
        return RequestRecord(index, len(inputs), latency, str(response.status), retry_after_s=_seconds(response))
    try:
        parsed = endpoint.parse(response.body, response.headers, payload.kind)
    except (orjson.JSONDecodeError, KeyError, TypeError, IndexError):
        return RequestRecord(index, len(inputs), latency, "bad_response")
    if parsed.embeddings != len(inputs):
        return RequestRecord(index, len(inputs), latency, "bad_response")
    return RequestRecord(
        index,
        len(inputs),
        latency,
        "200",
        embeddings=parsed.embeddings,
        server_ms=parsed.server_ms,
        timings_ms=parsed.timings_ms,
        zero_vectors=parsed.zero_vectors,
        cached=parsed.cached,
    )


def _seconds(response: Response) -> float | None:
    try:
        return float(response.headers["retry-after"])
    except (KeyError, ValueError):
        return None


async def run_load(
    target: Target,
    endpoint: Endpoint,
    payload: Payload,
    *,
    concurrency: int,
    timeout_s: float,
    first_index: int = 0,
    requests: int | None = None,
    duration_s: float | None = None,
    honor_retry_after: bool = False,
) -> LoadRun:
    """Send ``requests`` requests, or keep sending for ``duration_s`` seconds (requests in
    flight at the deadline still finish and count). Request numbers start at
    ``first_index``, so a warm-up and the measured run carry different inputs. Each
    request is answered within ``timeout_s`` or recorded as a timeout. With
    ``honor_retry_after``, a client refused with a Retry-After waits that long before its
    next request (as OpenAI's client libraries do), else it sends the next at once."""
    if (requests is None) == (duration_s is None):
        raise ValueError("give exactly one of requests and duration_s")
    # TEI's gRPC API (``grpc_endpoints.py``) sends on channels of its own, not over HTTP.
    over_grpc = hasattr(endpoint, "client")
    head = b"" if over_grpc else target.post_head(endpoint.path)
    records: list[RequestRecord] = []
    issued = 0
    started = time.perf_counter()
    deadline = started + duration_s if duration_s is not None else None

    async def user() -> None:
        nonlocal issued
        client = endpoint.client() if over_grpc else Client(target, timeout_s)  # type: ignore[union-attr]
        try:
            while True:
                if requests is not None and issued >= requests:
                    return
                if deadline is not None and time.perf_counter() >= deadline:
                    return
                index = first_index + issued
                issued += 1
                if over_grpc:
                    record = await endpoint.send(client, payload, index, timeout_s)  # type: ignore[union-attr]
                else:
                    record = await send_one(client, head, endpoint, payload, index)
                records.append(record)
                if honor_retry_after and record.retry_after_s:
                    pause = record.retry_after_s
                    if deadline is not None:
                        pause = min(pause, max(0.0, deadline - time.perf_counter()))
                    await asyncio.sleep(pause)
        finally:
            closed = client.close()
            if closed is not None:
                await closed

    await asyncio.gather(*(user() for _ in range(concurrency)))
    wall_s = time.perf_counter() - started
    records.sort(key=lambda r: r.index)
    return LoadRun(records, wall_s, concurrency)


# Process p of a split load numbers its requests from first_index + p * INDEX_STRIDE: no
# two processes send the same input.
INDEX_STRIDE = 10_000_000


@dataclass
class SplitRun:
    run: LoadRun
    # CPU seconds the load-generating processes used (this one's, or its children's).
    client_cpu_s: float


def _shares(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if p < total % parts else 0) for p in range(parts)]


# Spawned processes import for a second or two on a busy machine: they all begin this
# long after the split run is asked for, at the same moment.
START_LEAD_S = 4.0


def _load_in_process(options: dict, start_at: float, deadline_at: float | None) -> tuple[list[RequestRecord], float, float]:
    import resource

    time.sleep(max(0.0, start_at - time.time()))
    if deadline_at is not None:
        options = dict(options, duration_s=max(0.001, deadline_at - time.time()))
    before = resource.getrusage(resource.RUSAGE_SELF)
    run = asyncio.run(run_load(**options))
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return run.records, time.time(), cpu


async def run_load_split(processes: int, **options) -> SplitRun:
    """:func:`run_load` from ``processes`` processes at once (clients and requests split
    between them), so that the load is not capped by what one Python process can send;
    one run of every record. One process: this one."""
    if processes <= 1:
        import resource

        before = resource.getrusage(resource.RUSAGE_SELF)
        run = await run_load(**options)
        after = resource.getrusage(resource.RUSAGE_SELF)
        return SplitRun(run, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime))
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    concurrency = options.pop("concurrency")
    requests = options.pop("requests", None)
    first_index = options.pop("first_index", 0)
    clients = _shares(concurrency, processes)
    counts = _shares(requests, processes) if requests is not None else [None] * processes
    parts = [
        dict(options, concurrency=clients[p], requests=counts[p], first_index=first_index + p * INDEX_STRIDE)
        for p in range(processes)
        if clients[p] and counts[p] != 0
    ]
    loop = asyncio.get_running_loop()
    start_at = time.time() + START_LEAD_S
    duration_s = options.get("duration_s")
    deadline_at = start_at + duration_s if duration_s is not None else None
    with ProcessPoolExecutor(len(parts), mp_context=multiprocessing.get_context("spawn")) as pool:
        outcomes = await asyncio.gather(
            *(loop.run_in_executor(pool, _load_in_process, part, start_at, deadline_at) for part in parts)
        )
    records = sorted((r for part_records, _, _ in outcomes for r in part_records), key=lambda r: r.index)
    wall_s = max(ended for _, ended, _ in outcomes) - start_at
    return SplitRun(LoadRun(records, wall_s, concurrency), sum(cpu for _, _, cpu in outcomes))
