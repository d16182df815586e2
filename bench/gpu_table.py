"""The table of a GPU sweep (``bench/gpu_sweep.sh``): each model, payload and client count
with its throughput, latency, the share of its inputs answered from the response cache, and
its ratio to the in-process reference and to the forward alone (the GPU's limit), both
measured on the same GPU in the same run, and where the time went: the rows Triton ran per
model execution and the CPU each request cost the gateway's processes. Where the sweep ran a
peer (``PEER=infinity``), its throughput and p50 on the same row and embedgate's ratio to it.

``python -m embedgate.bench.gpu_table OUT_DIR`` prints it as Markdown (docs/gpu.md).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

_RUN = re.compile(r"(?P<model>[a-z0-9]+)-(?P<payload>single|batch)-(?P<clients>\d+)\.json")
_PEER = "infinity"


def rows(out: Path) -> list[dict]:
    found = []
    for path in sorted(out.glob("*.json")):
        match = _RUN.fullmatch(path.name)
        if not match:
            continue
        report = json.loads(path.read_text())
        reference = json.loads((out / f"{match['model']}-{match['payload']}-reference.json").read_text())
        # The forward limit is the model's, measured on one payload's texts.
        limits = [json.loads(p.read_text()).get("forward_limit_embeddings_per_s", 0) for p in out.glob(f"{match['model']}-*-reference.json")]
        load = report["load"]
        latency = load.get("response_time_s") or {}
        peer_path = path.with_name(f"{path.stem}.{_PEER}.json")
        peer = json.loads(peer_path.read_text())["load"] if peer_path.exists() else None
        found.append(
            {
                "model": match["model"],
                "payload": match["payload"],
                "clients": int(match["clients"]),
                "embeddings_per_s": load["embeddings_per_s"],
                "qps": load["qps"],
                "p50_ms": round(latency.get("p50", 0) * 1000, 2),
                "p99_ms": round(latency.get("p99", 0) * 1000, 2),
                "failed": load["failed_requests"],
                "cached_inputs": load.get("cached_inputs", 0),
                "cached_share": load.get("cached_inputs", 0) / max(load.get("embeddings", 0), 1),
                "reference_embeddings_per_s": reference["best_embeddings_per_s"],
                "forward_limit_embeddings_per_s": max(limits, default=0),
                "reference_p50_ms": reference["latency_ms"]["p50"],
                "rows_per_execution": (report.get("triton") or {}).get("average_batch_size"),
                "gateway_cpu_ms": (report.get("cpu_ms_per_request") or {}).get("gateway"),
                "peer_embeddings_per_s": peer["embeddings_per_s"] if peer else None,
                "peer_p50_ms": round((peer.get("response_time_s") or {}).get("p50", 0) * 1000, 2) if peer else None,
                "peer_failed": peer["failed_requests"] if peer else None,
            }
        )
    return sorted(found, key=lambda r: (r["model"], r["payload"] != "single", r["clients"]))


def markdown(found: list[dict]) -> str:
    peers = any(r["peer_embeddings_per_s"] is not None for r in found)
    header = (
        "| model | texts/request | clients | embeddings/s | requests/s | p50 ms | p99 ms | failed | cached "
        "| in-process embeddings/s | ratio | forward limit embeddings/s | share of limit | in-process p50 ms (1 call) "
        "| rows per Triton execution | gateway CPU ms per request |"
    )
    if peers:
        header += f" {_PEER} embeddings/s | {_PEER} p50 ms | {_PEER} failed | ratio to {_PEER} |"
    lines = [header, "|" + " --- |" * header.count(" |")]
    for r in found:
        ratio = r["embeddings_per_s"] / r["reference_embeddings_per_s"] if r["reference_embeddings_per_s"] else 0
        limit = r["forward_limit_embeddings_per_s"]
        share = f"{r['embeddings_per_s'] / limit:.0%}" if limit else "-"
        lines.append(
            f"| {r['model']} | {1 if r['payload'] == 'single' else 32} | {r['clients']} | {r['embeddings_per_s']:,.0f} "
            f"| {r['qps']:,.0f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['failed']} | {r['cached_share']:.1%} "
            f"| {r['reference_embeddings_per_s']:,.0f} | {ratio:.2f}x | {limit:,.0f} | {share} "
            f"| {r['reference_p50_ms']:.1f} | {_number(r['rows_per_execution'])} | {_number(r['gateway_cpu_ms'], 2)} |"
            + (_peer_cells(r) if peers else "")
        )
    return "\n".join(lines)


def _peer_cells(r: dict) -> str:
    if r["peer_embeddings_per_s"] is None:
        return " - | - | - | - |"
    ratio = r["embeddings_per_s"] / r["peer_embeddings_per_s"] if r["peer_embeddings_per_s"] else 0
    return f" {r['peer_embeddings_per_s']:,.0f} | {r['peer_p50_ms']:.1f} | {r['peer_failed']} | {ratio:.2f}x |"


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    print(markdown(rows(Path(args[0]))))


if __name__ == "__main__":
    main()
