"""``--compare-model``: the same run against a second model, and how the two compare.

Meant for a variant against its plain model (``--model m@int8 --compare-model m``): the
same payload, seed, clients and length, one run after the other on the same server, so
the ratios are measured minutes apart on one machine rather than across sessions.
"""

from __future__ import annotations

from embedgate.bench.report import format_summary


def _latency_ms(report: dict, percentile: int) -> float | None:
    described = (report.get("load") or {}).get("response_time_s") or {}
    value = described.get(f"p{percentile}")
    return round(value * 1000, 1) if value is not None else None


def load_columns(report: dict) -> dict:
    """A run's throughput and latency, as every comparison's line shows them."""
    return {
        "embeddings_per_s": (report.get("load") or {}).get("embeddings_per_s"),
        "p50_ms": _latency_ms(report, 50),
        "p99_ms": _latency_ms(report, 99),
    }


def model_row(report: dict) -> dict:
    """One model's line of the comparison: throughput, latency, parity and file size."""
    inprocess = report.get("inprocess") or {}
    model = report.get("model") or {}
    return {
        "model": report["config"]["model"],
        **load_columns(report),
        "parity_min_cosine": model.get("parity_min_cosine"),
        "onnx_mb": inprocess.get("onnx_mb"),
        "inprocess_embeddings_per_s": {
            strategy: baseline["embeddings_per_s"] for strategy, baseline in (inprocess.get("baselines") or {}).items()
        },
    }


def comparison(report: dict, other: dict) -> dict:
    """Both rows, and the first model's throughput as a ratio of the second's."""
    first, second = model_row(report), model_row(other)
    ratios = {}
    if first["embeddings_per_s"] and second["embeddings_per_s"]:
        ratios["server"] = round(first["embeddings_per_s"] / second["embeddings_per_s"], 3)
    for strategy, rate in first["inprocess_embeddings_per_s"].items():
        against = second["inprocess_embeddings_per_s"].get(strategy)
        if rate and against:
            ratios[f"inprocess_{strategy}"] = round(rate / against, 3)
    return {"models": [first, second], "throughput_ratio": ratios}


def _cell(value, fmt: str) -> str:
    return format(value, fmt) if value is not None else "n/a"


def format_comparison(report: dict) -> str:
    other = report["compare"]
    result = report["comparison"]
    lines = ["", f"--- the same run against {other['config']['model']}", format_summary(other), ""]
    lines.append("Model | embeddings/s | p50 / p99 ms | parity min cosine | ONNX MB")
    for row in result["models"]:
        lines.append(
            f"{row['model']} | {_cell(row['embeddings_per_s'], '.1f')} | "
            f"{_cell(row['p50_ms'], '.1f')} / {_cell(row['p99_ms'], '.1f')} | "
            f"{_cell(row['parity_min_cosine'], '.6f')} | {_cell(row['onnx_mb'], '.1f')}"
        )
    first, second = (row["model"] for row in result["models"])
    for what, ratio in result["throughput_ratio"].items():
        lines.append(f"Throughput {first} / {second} ({what.replace('_', ' ')}): {ratio:.3f}x")
    return "\n".join(lines)
