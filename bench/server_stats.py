"""Triton's counters for the benchmarked model, from the server's ``GET /metrics``.

Read before and after the measured run; the difference covers exactly that run.
``inference_count`` counts embedded inputs and ``execution_count`` model runs, so their
ratio is the average dynamic batch size Triton achieved. The per-request queue and
compute times show where a request's time inside Triton went.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

_PHASES = ("queue", "compute_input", "compute_infer", "compute_output")


@dataclass(frozen=True)
class TritonCounters:
    inferences: int
    executions: int
    requests: int  # successful requests Triton answered (a request may hold many inputs)
    phase_ns: dict[str, int]


def counters_from_entry(entry: dict) -> TritonCounters:
    stats = entry.get("inference_stats", {})
    return TritonCounters(
        inferences=int(entry.get("inference_count", 0)),
        executions=int(entry.get("execution_count", 0)),
        requests=int(stats.get("success", {}).get("count", 0)),
        phase_ns={phase: int(stats.get(phase, {}).get("ns", 0)) for phase in _PHASES},
    )


def serves(model: str, pretrained: str | None = None) -> Callable[[dict], bool]:
    """Which ``/metrics`` entries belong to the benchmarked model: the entry of that name,
    or for a CLIP model (named by model and pretrained) its text and image encoders."""
    if pretrained is None:
        return lambda entry: entry.get("name") == model
    from embedgate.api.models.names import clip_triton_name

    prefix = clip_triton_name(model, pretrained) + "_"
    return lambda entry: str(entry.get("triton_name", "")).startswith(prefix)


async def read_counters(
    session: aiohttp.ClientSession, base_url: str, match: Callable[[dict], bool]
) -> dict[str, TritonCounters] | None:
    """Counters of each Triton model ``match`` selects; None when /metrics is unavailable."""
    try:
        async with session.get(base_url.rstrip("/") + "/metrics") as response:
            if response.status != 200:
                return None
            answer = await response.json()
    except (aiohttp.ClientError, ValueError):
        return None
    return {
        entry.get("triton_name", entry.get("name", "")): counters_from_entry(entry)
        for entry in answer.get("model_stats", [])
        if match(entry)
    }


async def read_settled_counters(
    session: aiohttp.ClientSession, base_url: str, match: Callable[[dict], bool], *, timeout_s: float = 3.0
) -> dict[str, TritonCounters] | None:
    """Counters once they stop moving. Triton records a request's statistics after its
    response has gone out, so a reading taken the moment the last answer arrives can
    miss the last batch; two equal readings in a row mean nothing is still being counted."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    reading = await read_counters(session, base_url, match)
    while reading is not None and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
        again = await read_counters(session, base_url, match)
        if again == reading:
            break
        reading = again
    return reading


def _batching(before: TritonCounters | None, after: TritonCounters) -> dict:
    inferences = after.inferences - (before.inferences if before else 0)
    executions = after.executions - (before.executions if before else 0)
    requests = after.requests - (before.requests if before else 0)
    result = {
        "inferences": inferences,
        "executions": executions,
        "requests": requests,
        "average_batch_size": round(inferences / executions, 3) if executions else None,
    }
    for phase in _PHASES:
        spent = after.phase_ns[phase] - (before.phase_ns[phase] if before else 0)
        result[f"{phase}_ms_per_request"] = round(spent / requests / 1e6, 3) if requests else None
    return result


def batching_delta(before: dict[str, TritonCounters] | None, after: dict[str, TritonCounters] | None) -> dict | None:
    """What Triton did between two readings: overall and per Triton model."""
    if before is None or after is None:
        return None
    per_model = {name: _batching(before.get(name), counters) for name, counters in after.items()}
    inferences = sum(m["inferences"] for m in per_model.values())
    executions = sum(m["executions"] for m in per_model.values())
    return {
        "inferences": inferences,
        "executions": executions,
        "average_batch_size": round(inferences / executions, 3) if executions else None,
        "models": per_model,
    }
