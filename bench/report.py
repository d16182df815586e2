"""Statistics of a run, the printed summary, and the JSON file (the same figures).

Latency statistics cover successful requests; failures are counted by status. The
standard deviation is the sample standard deviation (n - 1), as the seed's script used.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

import numpy as np

from embedgate.bench.loadgen import LoadRun

PERCENTILES = (50, 90, 95, 99)


def describe(values: list[float]) -> dict | None:
    """count, mean, median, std, min, max and p50/p90/p95/p99 of ``values``; None if empty."""
    if not values:
        return None
    data = np.asarray(values, dtype=np.float64)
    described = {
        "count": int(data.size),
        "mean": float(data.mean()),
        "median": float(np.median(data)),
        "std": float(data.std(ddof=1)) if data.size > 1 else 0.0,
        "min": float(data.min()),
        "max": float(data.max()),
    }
    for p, value in zip(PERCENTILES, np.percentile(data, PERCENTILES)):
        described[f"p{p}"] = float(value)
    return described


def error_counts(run: LoadRun) -> dict[str, int]:
    counts: dict[str, int] = {}
    for record in run.records:
        if not record.ok:
            counts[record.status] = counts.get(record.status, 0) + 1
    return dict(sorted(counts.items()))


def load_summary(run: LoadRun) -> dict:
    """The seed's summary plus throughput in embeddings, percentiles and error counts."""
    ok = run.succeeded
    total = len(run.records)
    embeddings = sum(r.embeddings for r in ok)
    timing_names = sorted({name for r in ok for name in r.timings_ms})
    return {
        "concurrent_clients": run.concurrency,
        "requests_per_client": round(total / run.concurrency, 2),
        "total_requests": total,
        "successful_requests": len(ok),
        "failed_requests": total - len(ok),
        "errors": error_counts(run),
        "total_time_s": round(run.wall_s, 4),
        "qps": round(len(ok) / run.wall_s, 2) if run.wall_s else 0.0,
        "embeddings": embeddings,
        "embeddings_per_s": round(embeddings / run.wall_s, 2) if run.wall_s else 0.0,
        # Inputs the server answered from its response cache (x-cached-inputs).
        "cached_inputs": sum(r.cached for r in ok),
        "response_time_s": describe([r.latency_s for r in ok]),
        "processing_time_ms": describe([r.server_ms for r in ok if r.server_ms is not None]),
        # The gateway's per-layer timing headers (x-<name>-time-ms), averaged.
        "server_timings_ms": {
            name: round(float(np.mean([r.timings_ms[name] for r in ok if name in r.timings_ms])), 3)
            for name in timing_names
        },
        # A no-op-inference server answers zero vectors: say so, so its figures are
        # never mistaken for the model's.
        "server_mode": ("noop" if ok and all(r.zero_vectors for r in ok) else "model") if ok else None,
    }


def per_request(used: dict[str, float], requests: int) -> dict[str, float] | None:
    if not requests:
        return None
    return {role: round(seconds * 1000 / requests, 3) for role, seconds in sorted(used.items())}


def machine() -> dict:
    info = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    try:
        import onnxruntime

        info["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        pass
    return info


def _ms(seconds: float | None) -> float | None:
    return seconds * 1000 if seconds is not None else None


def _f(value: float | None, fmt: str) -> str:
    return format(value, fmt) if value is not None else "n/a"


def format_summary(report: dict) -> str:
    lines: list[str] = []
    load = report.get("load")
    if load:
        rt = load["response_time_s"] or {}
        pt = load["processing_time_ms"] or {}
        config = report["config"]
        lines += [
            f"Benchmark results: {config['payload']} payload, {config['per_request']} input(s) per "
            f"request, {config['endpoint']}, model {config['model']}",
            f"Concurrent clients: {load['concurrent_clients']}",
            f"Requests per client: {load['requests_per_client']}",
            f"Total requests: {load['total_requests']}",
            f"Total benchmark time: {load['total_time_s']:.2f} seconds",
            f"QPS: {load['qps']:.2f}",
            f"Mean response time: {_f(rt.get('mean'), '.4f')} seconds",
            f"Median response time: {_f(rt.get('median'), '.4f')} seconds",
            f"Standard deviation of response times: {_f(rt.get('std'), '.4f')} seconds",
            f"Mean inference time: {_f(pt.get('mean'), '.4f')} ms",
            f"Median inference time: {_f(pt.get('median'), '.4f')} ms",
            f"Standard deviation of inference times: {_f(pt.get('std'), '.4f')} ms",
            f"Embeddings per second: {load['embeddings_per_s']:.2f}",
            "Response time p50 / p90 / p95 / p99: "
            + " / ".join(_f(_ms(rt.get(f"p{p}")), ".1f") for p in PERCENTILES)
            + " ms",
            "Errors: " + (", ".join(f"{k}: {v}" for k, v in load["errors"].items()) or "none"),
        ]
        if load["server_timings_ms"]:
            lines.append(
                "Server timings (mean ms): "
                + ", ".join(f"{k} {v:.2f}" for k, v in load["server_timings_ms"].items())
            )
        if load["cached_inputs"]:
            share = load["cached_inputs"] / max(load["embeddings"], 1)
            lines.append(f"Answered from the server's response cache: {load['cached_inputs']} inputs ({share:.0%})")
        if load["server_mode"] == "noop":
            lines.append("Server mode: no-op inference (zero vectors; the gateway's own cost)")
    triton = report.get("triton")
    if triton:
        lines.append(
            f"Average Triton batch size: {_f(triton['average_batch_size'], '.2f')} "
            f"({triton['inferences']} inputs in {triton['executions']} model runs)"
        )
    cpu = report.get("cpu_ms_per_request")
    if cpu:
        lines.append("CPU per request (ms): " + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items()))
    by_process = report.get("cpu_ms_per_request_by_process")
    if by_process:
        lines.append("CPU per request by process (ms): " + ", ".join(f"{k} {v:.2f}" for k, v in by_process.items()))
    by_stage = report.get("cpu_ms_per_request_by_stage")
    if by_stage:
        lines.append("CPU per request by stage (ms): " + ", ".join(f"{k} {v:.3f}" for k, v in by_stage.items()))
    memory = report.get("memory")
    if memory:
        roles = ", ".join(f"{k} {v:.0f}" for k, v in memory["peak_by_role_mb"].items())
        lines.append(f"Server peak memory ({memory['kind'].upper()}): {memory['peak_mb']:.0f} MB ({roles})")
    inprocess = report.get("inprocess")
    if inprocess:
        for strategy, result in inprocess["baselines"].items():
            lines.append(
                f"In-process {strategy} (batch {result['batch_size']}): "
                f"{result['embeddings_per_s']:.2f} embeddings/s over {result['texts']} texts "
                f"(padding efficiency {result['padding_efficiency']:.2f})"
                + (
                    ", mean of {:.2f} before and {:.2f} after the server run".format(*result["runs_embeddings_per_s"])
                    if "runs_embeddings_per_s" in result
                    else ""
                )
            )
        for strategy, ratio in (inprocess.get("server_ratio") or {}).items():
            lines.append(f"Server / in-process {strategy}: {ratio:.3f}x")
    return "\n".join(lines)


def write_json(report: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")


def print_json(report: dict, path: Path | None) -> None:
    """A report printed as JSON, and written to ``path`` where one is given."""
    print(json.dumps(report, indent=2))
    if path is not None:
        write_json(report, path)
