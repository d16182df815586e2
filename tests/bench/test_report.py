"""Run statistics and the printed summary."""

import statistics

import numpy as np
import pytest

from embedgate.bench.loadgen import LoadRun, RequestRecord
from embedgate.bench.report import describe, format_summary, load_summary, per_request


def test_describe_matches_the_textbook_definitions():
    values = [0.5, 0.1, 0.3, 0.2, 0.9, 0.4, 0.7, 0.6, 0.8, 1.0]
    d = describe(values)
    assert d["count"] == 10
    assert d["mean"] == pytest.approx(statistics.mean(values))
    assert d["median"] == pytest.approx(statistics.median(values))
    assert d["std"] == pytest.approx(statistics.stdev(values))  # sample std, as the seed's script
    assert (d["min"], d["max"]) == (0.1, 1.0)
    assert d["p50"] == pytest.approx(d["median"])
    assert d["p90"] == pytest.approx(np.percentile(values, 90))
    assert d["p50"] <= d["p90"] <= d["p95"] <= d["p99"] <= d["max"]


def test_describe_of_nothing_and_of_one_value():
    assert describe([]) is None
    one = describe([2.0])
    assert one["std"] == 0.0 and one["p99"] == 2.0


def _record(index, status="200", latency=0.1, embeddings=1, server_ms=5.0, zero=False, cached=0, **timings):
    return RequestRecord(
        index, 1, latency, status,
        embeddings=embeddings if status == "200" else 0,
        server_ms=server_ms if status == "200" else None,
        timings_ms=timings, zero_vectors=zero, cached=cached,
    )


def test_load_summary_counts_add_up_and_errors_are_grouped_by_status():
    records = [_record(i, latency=0.1 * (i + 1), embeddings=4, tokenize=1.0 + i) for i in range(6)]
    records += [_record(6, "503"), _record(7, "503"), _record(8, "timeout"), _record(9, "bad_response")]
    summary = load_summary(LoadRun(records, wall_s=2.0, concurrency=4))
    assert summary["total_requests"] == 10
    assert summary["successful_requests"] == 6 and summary["failed_requests"] == 4
    assert summary["errors"] == {"503": 2, "bad_response": 1, "timeout": 1}
    assert summary["requests_per_client"] == 2.5
    assert summary["qps"] == 3.0  # successful requests per second
    assert summary["embeddings"] == 24 and summary["embeddings_per_s"] == 12.0
    # Latencies describe successful requests only.
    assert summary["response_time_s"]["count"] == 6
    assert summary["response_time_s"]["max"] == pytest.approx(0.6)
    assert summary["processing_time_ms"]["mean"] == 5.0
    assert summary["server_timings_ms"] == {"tokenize": 3.5}
    assert summary["server_mode"] == "model"
    assert summary["cached_inputs"] == 0


def test_a_server_answering_zero_vectors_is_reported_as_noop():
    records = [_record(i, zero=True) for i in range(3)]
    assert load_summary(LoadRun(records, 1.0, 1))["server_mode"] == "noop"
    records.append(_record(3, zero=False))
    assert load_summary(LoadRun(records, 1.0, 1))["server_mode"] == "model"
    failed = load_summary(LoadRun([_record(0, "503")], 1.0, 1))
    assert failed["server_mode"] is None and failed["response_time_s"] is None


def test_cpu_per_request_in_milliseconds():
    assert per_request({"gateway": 0.5, "triton": 2.0}, 1000) == {"gateway": 0.5, "triton": 2.0}
    assert per_request({"gateway": 0.5}, 0) is None


def test_summary_prints_the_seed_lines_and_the_additions():
    records = [_record(i, latency=0.01 * (i + 1), cached=i % 2) for i in range(20)]
    report = {
        "config": {"payload": "single", "per_request": 1, "endpoint": "/infer", "model": "m"},
        "load": load_summary(LoadRun(records, 1.0, 4)),
        "triton": {"average_batch_size": 2.5, "inferences": 20, "executions": 8},
        "cpu_ms_per_request": {"client": 0.3, "gateway": 1.2},
        "memory": {"kind": "pss", "peak_mb": 250.0, "peak_by_role_mb": {"gateway": 80.0, "triton": 170.0}},
        "inprocess": {
            "baselines": {
                "plain": {"batch_size": 32, "embeddings_per_s": 40.0, "texts": 20, "padding_efficiency": 0.7},
                "length_sorted": {
                    "batch_size": 32, "embeddings_per_s": 50.0, "texts": 20, "padding_efficiency": 0.9,
                    "runs_embeddings_per_s": [45.0, 55.0],
                },
            },
            "server_ratio": {"plain": 0.5, "length_sorted": 0.4},
        },
    }
    text = format_summary(report)
    for line in (
        "Concurrent clients: 4",
        "Requests per client: 5.0",
        "Total requests: 20",
        "Total benchmark time: 1.00 seconds",
        "QPS: 20.00",
        "Mean response time: 0.1050 seconds",
        "Median response time: 0.1050 seconds",
        "Mean inference time: 5.0000 ms",
        "Embeddings per second: 20.00",
        "Errors: none",
        "Answered from the server's response cache: 10 inputs (50%)",
        "Average Triton batch size: 2.50 (20 inputs in 8 model runs)",
        "CPU per request (ms): client 0.30, gateway 1.20",
        "Server peak memory (PSS): 250 MB (gateway 80, triton 170)",
        "In-process plain (batch 32): 40.00 embeddings/s over 20 texts (padding efficiency 0.70)",
        "In-process length_sorted (batch 32): 50.00 embeddings/s over 20 texts (padding efficiency 0.90), "
        "mean of 45.00 before and 55.00 after the server run",
        "Server / in-process length_sorted: 0.400x",
    ):
        assert line in text, line
    assert "Standard deviation of response times:" in text and "p99" in text
