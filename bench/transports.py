"""``--compare-endpoints``: the same run against other endpoints of the same server, one
after the other, and the table of them side by side: TEI's gRPC API (unary, streamed)
beside the HTTP routes, for instance. Each run after the first takes inputs of its own (the
seed moved on), so that a server with its response cache on computes them all.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from embedgate.bench.compare import _cell, load_columns


def endpoint_row(report: dict) -> dict:
    """One endpoint's line: throughput, latency, and the CPU a request cost each process role."""
    return {
        "endpoint": report["config"]["endpoint"],
        **load_columns(report),
        "errors": sum(((report.get("load") or {}).get("errors") or {}).values()),
        "cpu_ms_per_request": report.get("cpu_ms_per_request") or {},
    }


def _ratio(value: float | None, first: float | None) -> float | None:
    return round(value / first, 3) if value and first else None


def side_by_side(reports: list[dict]) -> dict:
    """Every endpoint's row, with its gateway CPU per request and throughput as ratios of the first's."""
    rows = [endpoint_row(report) for report in reports]
    first = rows[0]
    for row in rows:
        row["gateway_cpu_ratio"] = _ratio(row["cpu_ms_per_request"].get("gateway"),
                                          first["cpu_ms_per_request"].get("gateway"))
        row["throughput_ratio"] = _ratio(row["embeddings_per_s"], first["embeddings_per_s"])
    return {"endpoints": rows}


def run(args: argparse.Namespace, report: dict, measure: Callable[[argparse.Namespace, dict], None],
        config: Callable[[argparse.Namespace], dict]) -> dict:
    """``measure`` again for each of ``--compare-endpoints`` (the model is loaded already)."""
    reports = [report]
    for offset, endpoint in enumerate(args.compare_endpoints, start=1):
        other = argparse.Namespace(**{**vars(args), "endpoint": endpoint, "no_load": True, "inprocess": False,
                                      "seed": args.seed + offset})
        other_report = {"config": config(other)}
        measure(other, other_report)
        reports.append(other_report)
    return {**side_by_side(reports), "runs": reports[1:]}


def format_side_by_side(result: dict) -> str:
    lines = ["", "Endpoint | embeddings/s | p50 / p99 ms | errors | gateway CPU ms/request | vs the first: CPU, "
             "throughput"]
    for row in result["endpoints"]:
        lines.append(
            f"{row['endpoint']} | {_cell(row['embeddings_per_s'], '.1f')} | {_cell(row['p50_ms'], '.1f')} / "
            f"{_cell(row['p99_ms'], '.1f')} | {row['errors']} | "
            f"{_cell(row['cpu_ms_per_request'].get('gateway'), '.3f')} | "
            f"{_cell(row['gateway_cpu_ratio'], '.2f')}x, {_cell(row['throughput_ratio'], '.2f')}x"
        )
    return "\n".join(lines)
