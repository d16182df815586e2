"""Two keys on one model: a light key's latency while another key floods the server.

``python -m embedgate.bench.tenants --key-a A --key-b B`` against a running server with
both keys (``EMBEDGATE_API_KEYS``) and, so that every request is computed, its response
cache off. Three phases, one after the other:

1. idle: key B alone, one single-sentence request at a time, ``--light-interval`` apart:
   B's latency on a quiet server;
2. capacity: key A with ``--clients`` closed-loop clients for ``--calibrate`` seconds: the
   requests a second the server answers;
3. flood: key A open loop at ``--flood-factor`` times that capacity (each request sent on
   its schedule whether or not the earlier ones were answered), key B one request every
   ``--light-interval`` seconds, for ``--duration`` seconds.

The report: A's answered and refused requests and the latency of those answered, B's
latency idle and under the flood, and B's server-side stages under the flood (its
``x-*-time-ms`` headers: ``queue`` is the wait for its call to leave, ``inference`` the
Triton round trip of the call it went in). Every input is new (``--seed``, then each
request's index), so no response cache could answer one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np

try:  # uvloop: the load generator takes less of the CPU the server needs.
    from uvloop import run as _run_loop
except ImportError:  # pragma: no cover - other platforms
    _run_loop = asyncio.run

from embedgate.bench.connection import Connection, Target
from embedgate.bench.endpoints import build_endpoint, timing_headers
from embedgate.bench.payloads import SentencePayload
from embedgate.bench.report import machine

DEFAULT_URL = "http://127.0.0.1:8686"
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


@dataclass
class Answer:
    status: int  # 0: no answer (a broken connection, a timeout)
    latency_s: float
    headers: dict[str, str] = field(default_factory=dict)  # names lower-cased
    body: bytes = b""


class Pool:
    """Keep-alive connections to one target, each carrying one request at a time: a request
    takes a free one, or opens another (an open loop keeps as many as it has in flight)."""

    def __init__(self, target: Target, timeout_s: float):
        self.target, self.timeout_s = target, timeout_s
        self._free: list[Connection] = []
        self.opened = 0

    async def post(self, head: bytes, body: bytes) -> Answer:
        began = time.perf_counter()
        connection = None
        try:
            async with asyncio.timeout(self.timeout_s):
                while self._free and connection is None:
                    candidate = self._free.pop()
                    connection = None if candidate.closed else candidate
                if connection is None:
                    connection = await Connection.open(self.target)
                    self.opened += 1
                response = await connection.post(head, body)
        except (OSError, TimeoutError):
            if connection is not None:
                connection.close()
            return Answer(0, time.perf_counter() - began)
        self._free.append(connection)
        return Answer(response.status, time.perf_counter() - began, response.headers, response.body)

    def close(self) -> None:
        for connection in self._free:
            connection.close()
        self._free.clear()


class Sender:
    """One key's requests of single new sentences: request ``n`` of a phase carries
    sentence ``n`` of the phase's own seed."""

    def __init__(self, url: str, key: str, model: str, endpoint: str, seed: str, timeout_s: float):
        target = Target.from_url(url, {"Authorization": f"Bearer {key}"})
        self.pool = Pool(target, timeout_s)
        self.endpoint = build_endpoint(endpoint, model)
        self.head = target.post_head(self.endpoint.path)
        self.seed = seed

    def send(self, phase: str, n: int) -> Awaitable[Answer]:
        inputs = SentencePayload(seed=f"{self.seed}:{phase}").inputs(n)  # type: ignore[arg-type]
        return self.pool.post(self.head, self.endpoint.body(inputs, "text"))

    def phase(self, name: str) -> Callable[[int], Awaitable[Answer]]:
        return lambda n: self.send(name, n)


async def paced(send: Callable[[int], Awaitable[Answer]], per_s: float, seconds: float) -> list[Answer]:
    """Requests ``send(n)`` open loop, ``per_s`` a second for ``seconds``, each on its schedule
    whether or not the ones before it were answered."""
    started, sent = time.perf_counter(), []
    for n in range(int(per_s * seconds)):
        await asyncio.sleep(max(0.0, started + n / per_s - time.perf_counter()))
        sent.append(asyncio.ensure_future(send(n)))
    return list(await asyncio.gather(*sent))


async def closed_loop(send: Callable[[int], Awaitable[Answer]], clients: int, seconds: float) -> float:
    """Requests ``send(n)`` answered a second with ``clients`` always in flight (each sends
    its next when its last is answered); one refused ends the run (``RuntimeError``)."""
    deadline, answered, counter = time.perf_counter() + seconds, 0, iter(range(10**9))

    async def client() -> None:
        nonlocal answered
        while time.perf_counter() < deadline:
            answer = await send(next(counter))
            if answer.status != 200:
                raise RuntimeError(f"a closed-loop request was answered {answer.status}: {answer.body[:200]!r}")
            answered += 1

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return answered / (time.perf_counter() - started)


def percentiles_ms(answers: list[Answer]) -> dict[str, float] | None:
    if not answers:
        return None
    latencies = np.asarray([a.latency_s for a in answers]) * 1000
    p50, p90, p99 = np.percentile(latencies, (50, 90, 99))
    return {"p50": round(float(p50), 1), "p90": round(float(p90), 1), "p99": round(float(p99), 1),
            "max": round(float(latencies.max()), 1)}


def stages_ms(answers: list[Answer]) -> dict[str, float]:
    """The median of each of the server's timing headers."""
    timings = [timing_headers(answer.headers) for answer in answers]
    names = sorted({name for timing in timings for name in timing})
    return {name: round(float(np.median([timing[name] for timing in timings if name in timing])), 1)
            for name in names}


async def measure(args: argparse.Namespace) -> dict:
    a = Sender(args.url, args.key_a, args.model, args.endpoint, f"{args.seed}:a", args.timeout)
    b = Sender(args.url, args.key_b, args.model, args.endpoint, f"{args.seed}:b", args.timeout)
    try:
        idle = await paced(b.phase("idle"), 1 / args.light_interval, args.idle_requests * args.light_interval)
        capacity = await closed_loop(a.phase("capacity"), args.clients, args.calibrate)
        flood_per_s = args.flood_factor * capacity
        flood, light = await asyncio.gather(
            paced(a.phase("flood"), flood_per_s, args.duration),
            paced(b.phase("flood"), 1 / args.light_interval, args.duration),
        )
    finally:
        a.pool.close()
        b.pool.close()
    served_a = [x for x in flood if x.status == 200]
    served_b = [x for x in light if x.status == 200]
    statuses: dict[str, int] = {}
    for answer in flood + light:
        statuses[str(answer.status)] = statuses.get(str(answer.status), 0) + 1
    a_p50 = percentiles_ms(served_a)
    b_p50 = percentiles_ms(served_b)
    return {
        "machine": machine(),
        "settings": {"flood_factor": args.flood_factor, "light_interval_s": args.light_interval,
                     "duration_s": args.duration, "clients": args.clients, "endpoint": args.endpoint},
        "capacity_per_s": round(capacity, 1),
        "flood_per_s": round(flood_per_s, 1),
        "a": {"sent": len(flood), "answered": len(served_a), "refused": len(flood) - len(served_a),
              "answered_ms": a_p50, "connections": a.pool.opened},
        "b": {"sent": len(light), "answered": len(served_b), "flood_ms": b_p50,
              "idle_ms": percentiles_ms([x for x in idle if x.status == 200]),
              "flood_stages_ms": stages_ms(served_b)},
        "statuses": statuses,
        "b_over_a_p50": round(b_p50["p50"] / a_p50["p50"], 3) if a_p50 and b_p50 else None,
    }


def summary(report: dict) -> str:
    a, b = report["a"], report["b"]
    a_ms, b_ms, idle = a["answered_ms"] or {}, b["flood_ms"] or {}, b["idle_ms"] or {}
    return "\n".join([
        f"capacity {report['capacity_per_s']} requests/s; flood {report['flood_per_s']}/s for "
        f"{report['settings']['duration_s']:g} s",
        f"A: {a['sent']} sent, {a['answered']} answered (p50 {a_ms.get('p50')} ms, p90 {a_ms.get('p90')}), "
        f"{a['refused']} refused",
        f"B: {b['sent']} sent, {b['answered']} answered; p50 {b_ms.get('p50')} ms (p90 {b_ms.get('p90')}, "
        f"max {b_ms.get('max')}) under the flood, {idle.get('p50')} ms idle",
        f"B's stages under the flood (median ms): {b['flood_stages_ms']}",
        f"B p50 / A p50: {report['b_over_a_p50']}",
    ])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("EMBEDGATE_URL", DEFAULT_URL))
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--endpoint", default="/infer", choices=("/infer", "/v1/embeddings"))
    parser.add_argument("--key-a", required=True, help="the flooding key")
    parser.add_argument("--key-b", required=True, help="the light key")
    parser.add_argument("--flood-factor", type=float, default=2.5,
                        help="A's open-loop rate over the capacity measured first (default 2.5)")
    parser.add_argument("--light-interval", type=float, default=0.5, help="seconds between B's requests")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of flood (default 20)")
    parser.add_argument("--calibrate", type=float, default=5.0, help="seconds of the capacity run (default 5)")
    parser.add_argument("--clients", type=int, default=64, help="closed-loop clients of the capacity run")
    parser.add_argument("--idle-requests", type=int, default=20, help="B's requests on the idle server")
    parser.add_argument("--timeout", type=float, default=60.0, help="per-request timeout (s)")
    parser.add_argument("--seed", default=str(time.time_ns()), help="seed of the inputs (default: new ones)")
    parser.add_argument("--json", help="also write the report to this file")
    args = parser.parse_args(argv)
    report = _run_loop(measure(args))
    print(summary(report))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=2)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
