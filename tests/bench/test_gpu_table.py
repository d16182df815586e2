"""The GPU sweep's table: every run report beside its in-process reference, in order."""

from __future__ import annotations

import json

from embedgate.bench import gpu_table


def _write(out, name, body):
    (out / name).write_text(json.dumps(body))


def test_runs_are_put_against_their_reference_in_model_payload_and_client_order(tmp_path):
    for payload, rate in (("single", 9000.0), ("batch", 10000.0)):
        _write(
            tmp_path, f"minilm-{payload}-reference.json",
            {"best_embeddings_per_s": rate, "forward_limit_embeddings_per_s": 80000.0, "latency_ms": {"p50": 4.0}},
        )
    for payload, clients, rate in (("batch", 64, 20000.0), ("single", 64, 1800.0), ("single", 8, 900.0)):
        load = {
            "embeddings_per_s": rate, "qps": rate / (32 if payload == "batch" else 1), "failed_requests": 0,
            "response_time_s": {"p50": 0.01, "p99": 0.02}, "embeddings": 1000, "cached_inputs": 25,
        }
        report = {"load": load}
        if clients == 64:
            report |= {"triton": {"average_batch_size": 12.5}, "cpu_ms_per_request": {"gateway": 0.61}}
        _write(tmp_path, f"minilm-{payload}-{clients}.json", report)
    _write(tmp_path, "minilm-load.json", {"status": "loaded"})  # not a run: left out

    rows = gpu_table.rows(tmp_path)

    assert [(r["payload"], r["clients"]) for r in rows] == [("single", 8), ("single", 64), ("batch", 64)]
    table = gpu_table.markdown(rows).splitlines()
    assert len(table) == 2 + 3
    row = "| minilm | 32 | 64 | 20,000 | 625 | 10.0 | 20.0 | 0 | 2.5% | 10,000 | 2.00x | 80,000 | 25% | 4.0 | 12.5 | 0.61 |"
    assert row in table
    # A report without Triton's statistics or CPU figures: dashes, not zeros.
    assert table[2].endswith("| 4.0 | - | - |")


def test_a_peer_on_the_same_row_gets_its_columns_and_the_ratio_to_it(tmp_path):
    _write(
        tmp_path, "base-single-reference.json",
        {"best_embeddings_per_s": 5000.0, "forward_limit_embeddings_per_s": 0, "latency_ms": {"p50": 7.0}},
    )
    load = {"embeddings_per_s": 3000.0, "qps": 3000.0, "failed_requests": 0, "response_time_s": {"p50": 0.02, "p99": 0.04}}
    _write(tmp_path, "base-single-256.json", {"load": load})
    _write(tmp_path, "base-single-256.infinity.json", {"load": {**load, "embeddings_per_s": 1200.0, "failed_requests": 3}})
    _write(tmp_path, "base-single-1.json", {"load": load})  # a row the peer did not run

    table = gpu_table.markdown(gpu_table.rows(tmp_path)).splitlines()

    assert table[0].endswith("| infinity embeddings/s | infinity p50 ms | infinity failed | ratio to infinity |")
    assert table[1].count("---") == table[0].count(" |")
    assert table[2].endswith("| - | - | - | - |")
    assert table[3].endswith("| 1,200 | 20.0 | 3 | 2.50x |")


def test_no_peer_no_peer_columns(tmp_path):
    _write(
        tmp_path, "base-single-reference.json",
        {"best_embeddings_per_s": 5000.0, "forward_limit_embeddings_per_s": 0, "latency_ms": {"p50": 7.0}},
    )
    _write(tmp_path, "base-single-1.json", {"load": {"embeddings_per_s": 1.0, "qps": 1.0, "failed_requests": 0}})

    assert "infinity" not in gpu_table.markdown(gpu_table.rows(tmp_path))
