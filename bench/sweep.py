"""``benchmark.py --sweep``: the server at every load, against the model in this process.

One run measures 1, 8 and 64 clients (``--sweep-clients``), each sending single sentences
and then ``--batch-size``-sentence requests, ``--duration`` seconds a step. Beside them, the
same ONNX file in this process with every core (:mod:`inprocess`) gives three references:

- **one sentence**: tokenized and embedded alone, the p50 over many: the latency no server
  can beat for one client sending one sentence;
- **one request's sentences**: a request's ``--batch-size`` sentences tokenized and
  embedded as one batch, padded to its longest, the p50: the same for one client sending
  batches;
- **the sorted limit**: many sentences sorted by length and embedded in batches, the
  embeddings per second of the best offline batching (the mean of a run before the
  sweep and one after: the machine's speed drifts over minutes).

Each step's ratios are its p50 over the reference latency of its request size, and its
throughput over the sorted limit. The targets (``TARGETS``) are the low-load latency ratios
at one client and the throughput ratio at the most clients. Every step sends inputs of its
own seed, so no step meets another's inputs in the server's response cache.

Two breakdowns say where the time goes: one client's single-sentence p50 split into its
parts (``breakdown``), and what the server spends per embedding at the most clients,
split between the model's own runs (the repository's stub run in this process on batches
of the size Triton ran, :mod:`served_model`), Triton, the gateway, the load generator and
idle cores, against what the sorted limit spends (``throughput_breakdown``).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from embedgate.bench import inprocess
from embedgate.bench.payloads import SentencePayload
from embedgate.bench.report import describe

DEFAULT_CLIENTS = (1, 8, 64)
PAYLOADS = ("single", "batch")
# Requests timed for each in-process latency reference, after one untimed.
REFERENCE_REQUESTS = {"single": 200, "batch": 40}
LIMIT_TEXTS = 4096
_SEED_STRIDE = 1000  # step n sends seed + (n + 1) * stride: inputs of its own


@dataclass(frozen=True)
class Target:
    """A ratio a step must reach: ``at_most`` for latency, else at least."""

    clients: str  # "fewest" or "most"
    payload: str
    ratio: str  # "latency" or "throughput"
    bound: float
    at_most: bool

    def met(self, value: float) -> bool:
        return value <= self.bound if self.at_most else value >= self.bound

    def describe(self) -> str:
        return f"{'<=' if self.at_most else '>='} {self.bound:g}x"


TARGETS = (
    Target("fewest", "single", "latency", 1.3, True),
    Target("fewest", "batch", "latency", 1.15, True),
    Target("most", "single", "throughput", 1.0, False),
    Target("most", "batch", "throughput", 1.0, False),
)


def step_args(args: argparse.Namespace, number: int, clients: int, payload: str) -> argparse.Namespace:
    return argparse.Namespace(
        **{**vars(args), "concurrency": clients, "payload": payload, "seed": args.seed + (number + 1) * _SEED_STRIDE}
    )


def reference_latencies(model: inprocess.LocalModel, payload: SentencePayload, requests: int) -> dict:
    """p50/p99 (seconds) of embedding one request's inputs at a time, tokenizing included."""
    inputs = [payload.inputs(index) for index in range(requests + 1)]
    inprocess.warm_up(model, inputs[0], len(inputs[0]))
    latencies = []
    for texts in inputs[1:]:
        started = time.perf_counter()
        tokens = model.tokenizer.encode(texts)
        longest = int(max(tokens.token_counts))  # no padding past the longest input
        inprocess.embed(model, tokens.input_ids[:, :longest], tokens.attention_mask[:, :longest])
        latencies.append(time.perf_counter() - started)
    return describe(latencies) or {}


def run_latencies(model: inprocess.LocalModel, payload: SentencePayload, requests: int) -> dict:
    """p50/p99 (seconds) of the model run alone (tokenized beforehand), one request at a time."""
    batches = [model.tokenizer.encode(payload.inputs(index)) for index in range(requests + 1)]
    latencies = []
    for tokens in batches:
        longest = int(max(tokens.token_counts))
        started = time.perf_counter()
        inprocess.embed(model, tokens.input_ids[:, :longest], tokens.attention_mask[:, :longest])
        latencies.append(time.perf_counter() - started)
    return describe(latencies[1:]) or {}


def breakdown(step: dict, references: dict) -> dict | None:
    """Where one client's single-sentence p50 goes (ms): outside the gateway (client, HTTP,
    the server's parsing before its clock starts), the gateway's own handling, tokenizing,
    waiting, Triton with its Python-backend stub, and the model run itself (in-process on
    one thread, as an instance runs it). The server's parts are the means of its timing
    headers, so the parts add up to about the p50, not exactly."""
    load = step["load"]
    timings = load["server_timings_ms"]
    model_ms = references.get("model_run_one_thread", {}).get("p50")
    if not {"total", "inference", "tokenize"} <= set(timings) or model_ms is None or not load["response_time_s"]:
        return None
    p50_ms = load["response_time_s"]["p50"] * 1000
    queue = timings.get("queue", 0.0)
    model = model_ms * 1000
    return {
        "p50": round(p50_ms, 2),
        "outside_the_gateway": round(p50_ms - timings["total"], 2),
        "gateway": round(timings["total"] - timings["inference"] - timings["tokenize"] - queue, 2),
        "tokenize": round(timings["tokenize"], 2),
        "queue": round(queue, 2),
        "triton_and_stub": round(timings["inference"] - model, 2),
        "model_run": round(model, 2),
    }


def throughput_breakdown(step: dict, served: dict | None, limit_per_s: float, cores: int) -> dict | None:
    """What one embedding of ``step`` cost (ms of a core): the model's own runs
    (``served``: the stub in this process), the rest of Triton's CPU, the gateway's, the
    load generator's and the cores' idle time, beside what the sorted limit spends per
    embedding; and the throughput ratio the server would reach with no idle core."""
    load, cpu = step["load"], step.get("cpu_ms_per_request") or {}
    if served is None or not load["embeddings"] or not {"triton", "gateway", "client"} <= set(cpu):
        return None
    per_request = load["embeddings"] / load["successful_requests"]
    triton, gateway, client = (cpu[role] / per_request for role in ("triton", "gateway", "client"))
    spent = cores * 1000 / load["embeddings_per_s"]
    busy = triton + gateway + client
    model = served["core_ms_per_text"]
    return {
        "clients": step["clients"],
        "embeddings_per_s": load["embeddings_per_s"],
        "rows_per_model_request": served["rows_per_request"],
        "model_run": round(model, 3),
        "triton_own": round(triton - model, 3),
        "gateway": round(gateway, 3),
        "client": round(client, 3),
        "idle": round(max(0.0, spent - busy), 3),
        "sorted_limit": round(cores * 1000 / limit_per_s, 3),
        "ratio_without_idle": round(cores * 1000 / busy / limit_per_s, 3),
    }


def limit_texts(args: argparse.Namespace) -> list[str]:
    """The single sentences the sorted limit and the served model in-process embed."""
    payload = SentencePayload(1, args.seed)
    return [payload.inputs(index)[0] for index in range(args.sweep_limit_texts)]


def sorted_limit(model: inprocess.LocalModel, texts: list[str], batch_size: int) -> dict:
    inprocess.warm_up(model, texts, batch_size)
    return inprocess.run_baseline(model, texts, "length_sorted", batch_size).as_dict()


def ratios(step: dict, references: dict) -> dict:
    load = step["load"]
    latency = (load["response_time_s"] or {}).get("p50")
    reference = references["latency"][step["payload"]]["p50"]
    return {
        "latency": round(latency / reference, 3) if latency else None,
        "throughput": round(load["embeddings_per_s"] / references["sorted_limit"]["embeddings_per_s"], 3),
    }


def verdicts(steps: list[dict]) -> list[dict]:
    """Each target with the step it applies to, its ratio and whether it is met."""
    clients = sorted({step["clients"] for step in steps})
    found = []
    for target in TARGETS:
        wanted = clients[0] if target.clients == "fewest" else clients[-1]
        step = next((s for s in steps if s["clients"] == wanted and s["payload"] == target.payload), None)
        value = step["ratios"][target.ratio] if step else None
        found.append({
            "clients": wanted, "payload": target.payload, "ratio": target.ratio, "target": target.describe(),
            "value": value, "met": value is not None and target.met(value),
        })
    return found


async def run(
    args: argparse.Namespace,
    report: dict,
    *,
    server_run: Callable[..., Awaitable[Any]],
    open_model: Callable[[argparse.Namespace], inprocess.LocalModel],
    progress: Callable[[str], None],
    measure_served: Callable[[inprocess.LocalModel, list[str], int], dict | None] | None = None,
    cores: int = 1,
) -> None:
    clients = args.sweep_clients or list(DEFAULT_CLIENTS)
    model: inprocess.LocalModel | None = None
    references: dict = {}
    texts = limit_texts(args)  # the sorted limit's, before and after, and the served model's in-process

    def measure_references(_payload: Any) -> None:
        nonlocal model
        if model is not None:
            return
        model = open_model(args)  # published by the first step's load
        progress("in-process references: one sentence, one request's sentences, the sorted limit")
        references["latency"] = {
            "single": reference_latencies(model, SentencePayload(1, args.seed), REFERENCE_REQUESTS["single"]),
            "batch": reference_latencies(model, SentencePayload(args.batch_size, args.seed), REFERENCE_REQUESTS["batch"]),
        }
        references["sorted_limit_before"] = sorted_limit(model, texts, args.batch_size)
        one_thread = open_model(argparse.Namespace(**{**vars(args), "inprocess_threads": 1}))
        references["model_run_one_thread"] = run_latencies(
            one_thread, SentencePayload(1, args.seed), REFERENCE_REQUESTS["single"]
        )

    steps = []
    for payload in PAYLOADS:
        for count in clients:
            number = len(steps)
            progress(f"sweep step {number + 1}/{len(PAYLOADS) * len(clients)}: {count} clients, {payload}")
            step: dict = {"clients": count, "payload": payload}
            await server_run(step_args(args, number, count, payload), step, measure_references)
            steps.append(step)
    assert model is not None  # the first step measured the references
    after = sorted_limit(model, texts, args.batch_size)
    references["sorted_limit"] = inprocess.bracketed(references.pop("sorted_limit_before"), after)
    for step in steps:
        step["ratios"] = ratios(step, references)
    fewest = next(s for s in steps if s["payload"] == "single" and s["clients"] == min(clients))
    most = next(s for s in steps if s["payload"] == "single" and s["clients"] == max(clients))
    served = None
    batch = (most.get("triton") or {}).get("average_batch_size")
    if measure_served is not None and batch:
        rows = max(1, round(batch))
        progress(f"the served model in-process: requests of {rows} sentences, as Triton ran them")
        served = measure_served(model, texts, rows)
    report["sweep"] = {
        "batch_size": args.batch_size,
        "intra_op_threads": model.intra_op_threads,
        "references": references,
        "steps": steps,
        "targets": verdicts(steps),
        "breakdown": breakdown(fewest, references),
        "throughput_breakdown": throughput_breakdown(
            most, served, references["sorted_limit"]["embeddings_per_s"], cores
        ),
    }


def _ms(seconds: float | None) -> str:
    return f"{seconds * 1000:.1f}" if seconds is not None else "n/a"


def format_sweep(report: dict) -> str:
    sweep = report["sweep"]
    size = sweep["batch_size"]
    what = {"single": "1 sentence", "batch": f"{size} sentences"}
    references = sweep["references"]
    lines = [
        f"Sweep of {report['config']['model']}: p50 over the in-process p50 of the request's size, "
        "embeddings/s over the sorted in-process limit",
        "",
        "| clients | request | p50 ms | p99 ms | embeddings/s | errors | peak MB "
        "| p50 / in-process | embeddings/s / sorted limit |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for step in sweep["steps"]:
        load, found = step["load"], step["ratios"]
        latency = load["response_time_s"] or {}
        memory = step.get("memory", {}).get("peak_mb")
        lines.append(
            f"| {step['clients']} | {what[step['payload']]} | {_ms(latency.get('p50'))} | {_ms(latency.get('p99'))} "
            f"| {load['embeddings_per_s']:.0f} | {load['failed_requests']} | {memory if memory is not None else 'n/a'} "
            f"| {_ratio(found['latency'])} | {_ratio(found['throughput'])} |"
        )
    limit = references["sorted_limit"]
    lines += [
        "",
        "In-process, every core: 1 sentence p50 {} ms; {} sentences p50 {} ms; sorted limit {:.0f} embeddings/s "
        "(runs before and after: {:.0f}, {:.0f})".format(
            _ms(references["latency"]["single"].get("p50")), size, _ms(references["latency"]["batch"].get("p50")),
            limit["embeddings_per_s"], *limit["runs_embeddings_per_s"],
        ),
    ]
    parts = sweep.get("breakdown")
    if parts:
        lines.append(
            "{} client(s), 1 sentence, p50 {:.2f} ms: outside the gateway {:.2f}, the gateway {:.2f}, tokenizing "
            "{:.2f}, waiting {:.2f}, Triton and its stub {:.2f}, the model run (one thread) {:.2f}".format(
                fewest_clients(sweep), parts["p50"], parts["outside_the_gateway"], parts["gateway"], parts["tokenize"],
                parts["queue"], parts["triton_and_stub"], parts["model_run"],
            )
        )
    spent = sweep.get("throughput_breakdown")
    if spent:
        lines.append(
            "{} clients, 1 sentence, {:.0f} embeddings/s, per embedding in ms of a core: the model's runs {:.2f} "
            "(requests of {} sentences), the rest of Triton {:.2f}, the gateway {:.2f}, the load generator {:.2f}, "
            "idle {:.2f}; the sorted limit spends {:.2f}; with no idle core: {}".format(
                spent["clients"], spent["embeddings_per_s"], spent["model_run"], spent["rows_per_model_request"],
                spent["triton_own"], spent["gateway"], spent["client"], spent["idle"], spent["sorted_limit"],
                _ratio(spent["ratio_without_idle"]),
            )
        )
    lines += ["", "Targets:"]
    for verdict in sweep["targets"]:
        lines.append(
            f"- {verdict['clients']} client(s), {what[verdict['payload']]}, {verdict['ratio']} ratio "
            f"{_ratio(verdict['value'])} (target {verdict['target']}): {'met' if verdict['met'] else 'NOT met'}"
        )
    return "\n".join(lines)


def fewest_clients(sweep: dict) -> int:
    return min(step["clients"] for step in sweep["steps"])


def _ratio(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "n/a"
