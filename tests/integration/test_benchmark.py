"""benchmark.py against the real gateway: a short smoke run that checks the report is
complete and its figures are consistent. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from .conftest import MINILM, start_gateway, wait_ready

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_benchmark(gateway, out: Path, *args: str, stdout=("QPS:", "Mean response time:")) -> dict:
    command = [
        sys.executable, "benchmark.py", "--url", gateway.url, "--model", MINILM,
        "--model-repository", str(gateway.repository), "--json", str(out), *args,
    ]
    finished = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert all(line in finished.stdout for line in stdout), finished.stdout
    return json.loads(out.read_text())


def assert_ordered(described: dict) -> None:
    assert described["min"] <= described["p50"] <= described["p90"] <= described["p95"] <= described["p99"] <= described["max"]


def test_smoke_run_with_in_process_baselines(gateway, minilm_loaded, tmp_path):
    report = run_benchmark(
        gateway, tmp_path / "single.json",
        "--payload", "single", "--requests", "20", "--concurrency", "4", "--warmup", "0.5", "--inprocess",
    )
    load = report["load"]
    assert load["total_requests"] == 20 == load["successful_requests"] + load["failed_requests"]
    assert load["successful_requests"] == 20 and load["errors"] == {}
    assert load["requests_per_client"] == 5
    assert load["qps"] > 0 and load["embeddings"] == 20 and load["embeddings_per_s"] > 0
    assert load["server_mode"] == "model"
    assert_ordered(load["response_time_s"])
    assert load["processing_time_ms"]["count"] == 20
    assert {"tokenize", "inference", "total"} <= set(load["server_timings_ms"])

    # The warm-up ran before the first reading of /metrics: Triton embedded exactly the 20.
    triton = report["triton"]
    assert triton["inferences"] == 20
    assert 1 <= triton["average_batch_size"] <= 4  # never more than the 4 clients' requests

    memory = report["memory"]
    assert set(memory["peak_by_role_mb"]) == {"gateway", "triton"}
    roles = memory["peak_by_role_mb"].values()
    assert 0 < max(roles) <= memory["peak_mb"] <= sum(roles) + 0.2
    assert gateway.process.pid in memory["pids"]
    assert set(gateway.children("tritonserver")) <= set(memory["pids"])
    assert {"client", "gateway", "triton"} <= set(report["cpu_ms_per_request"])

    baselines = report["inprocess"]["baselines"]
    assert set(baselines) == {"plain", "length_sorted"}
    for result in baselines.values():
        assert result["texts"] == 20 and result["embeddings_per_s"] > 0
        # Run before and after the server's run; the limit is their mean.
        before, after = result["runs_embeddings_per_s"]
        assert before > 0 and after > 0
        assert result["embeddings_per_s"] == pytest.approx((before + after) / 2, abs=0.01)
    assert baselines["length_sorted"]["padding_efficiency"] >= baselines["plain"]["padding_efficiency"]
    assert report["inprocess"]["onnx_file"].endswith("model.onnx")
    ratios = report["inprocess"]["server_ratio"]
    for strategy, ratio in ratios.items():
        assert ratio == round(load["embeddings_per_s"] / baselines[strategy]["embeddings_per_s"], 4)


def test_batch_payload_counts_embeddings_not_requests(gateway, minilm_loaded, tmp_path):
    report = run_benchmark(
        gateway, tmp_path / "batch.json",
        "--payload", "batch", "--batch-size", "8", "--requests", "6", "--concurrency", "2", "--warmup", "0",
        "--seed", "1",
    )
    load = report["load"]
    assert load["successful_requests"] == 6 and load["embeddings"] == 48
    assert report["triton"]["inferences"] == 48
    assert report["config"]["per_request"] == 8


def test_repeated_inputs_are_answered_from_the_response_cache_and_counted(gateway, minilm_loaded, tmp_path):
    # One client at a time, so no two requests miss on one input together: Triton runs
    # exactly the inputs that were not answered from the cache.
    report = run_benchmark(
        gateway, tmp_path / "repeat.json",
        "--requests", "60", "--concurrency", "1", "--warmup", "0", "--seed", "2", "--repeat", "0.5", "--hot-inputs", "5",
    )
    load = report["load"]
    assert load["successful_requests"] == 60 and report["config"]["repeat"] == 0.5
    # About 30 draws from 5 popular inputs: all but the first of each are cache hits.
    assert 10 <= load["cached_inputs"] <= 45
    assert report["triton"]["inferences"] == load["embeddings"] - load["cached_inputs"]


def test_a_sweep_measures_each_step_against_the_in_process_references(gateway, minilm_loaded, tmp_path):
    report = run_benchmark(
        gateway, tmp_path / "sweep.json",
        "--sweep", "--sweep-clients", "1", "2", "--batch-size", "4", "--duration", "1", "--warmup", "0",
        "--seed", "3", "--sweep-limit-texts", "128", "--plot", str(tmp_path / "sweep.svg"), stdout=("| clients | request | p50 ms", "Triton and its stub", "per embedding in ms of a core", "Targets:"),
    )
    sweep = report["sweep"]
    assert [(s["clients"], s["payload"]) for s in sweep["steps"]] == [(1, "single"), (2, "single"), (1, "batch"), (2, "batch")]
    references = sweep["references"]
    # Measured apart, at other moments: on a loaded machine their order can go either way.
    assert references["latency"]["single"]["p50"] > 0 and references["latency"]["batch"]["p50"] > 0
    assert references["sorted_limit"]["texts"] == 128 and references["sorted_limit"]["embeddings_per_s"] > 0
    for step in sweep["steps"]:
        load = step["load"]
        assert load["successful_requests"] > 0 and load["errors"] == {} and load["cached_inputs"] == 0
        assert step["triton"]["inferences"] == load["embeddings"]  # every input ran the model
        assert step["memory"]["peak_mb"] > 0
        reference = references["latency"][step["payload"]]["p50"]
        assert step["ratios"]["latency"] == round(load["response_time_s"]["p50"] / reference, 3)
    assert {t["clients"] for t in sweep["targets"]} == {1, 2}
    # One client's single-sentence p50, split by the server's timing headers and the model run alone.
    parts = sweep["breakdown"]
    assert set(parts) == {"p50", "outside_the_gateway", "gateway", "tokenize", "queue", "triton_and_stub", "model_run"}
    (lone,) = [s for s in sweep["steps"] if (s["clients"], s["payload"]) == (1, "single")]
    assert parts["p50"] == round(lone["load"]["response_time_s"]["p50"] * 1000, 2)
    assert parts["model_run"] > 0 and parts["tokenize"] > 0
    # The parts split the p50 whole (the model run, measured apart, is taken out of
    # Triton's time; on a loaded machine that part can come out negative).
    assert sum(v for k, v in parts.items() if k != "p50") == pytest.approx(parts["p50"], abs=0.05)
    # What an embedding cost at the most clients: the served stub (run in the benchmark's
    # process on batches of the size Triton ran) apart from the rest of the server.
    spent = sweep["throughput_breakdown"]
    (busiest,) = [s for s in sweep["steps"] if (s["clients"], s["payload"]) == (2, "single")]
    assert spent["clients"] == 2 and spent["embeddings_per_s"] == busiest["load"]["embeddings_per_s"]
    assert spent["rows_per_model_request"] == max(1, round(busiest["triton"]["average_batch_size"]))
    assert spent["model_run"] > 0 and spent["gateway"] > 0 and spent["sorted_limit"] > 0
    assert (tmp_path / "sweep.svg").read_text().startswith("<svg")


def test_noop_gateway_answers_zero_vectors_and_the_benchmark_says_so(gateway, minilm_loaded, tmp_path):
    # A second gateway on the same repository restores MiniLM from the manifest.
    noop = start_gateway(gateway.repository, tmp_path / "noop.log", noop_inference="true")
    try:
        wait_ready(noop)
        answer = httpx.post(f"{noop.url}/infer", json={"model_name": MINILM, "text": ["a", "b c"]}, timeout=30)
        assert answer.status_code == 200, answer.text
        vectors = np.asarray(answer.json()["text_embeddings"])
        assert vectors.shape == (2, 384) and not vectors.any()
        assert "no-op inference is on" in noop.log()

        report = run_benchmark(noop, tmp_path / "noop.json", "--requests", "10", "--concurrency", "2", "--warmup", "0")
        assert report["load"]["server_mode"] == "noop"
        assert report["load"]["successful_requests"] == 10
        # Triton ran nothing for these requests.
        assert report["triton"]["inferences"] == 0 and report["triton"]["average_batch_size"] is None
    finally:
        noop.stop()
