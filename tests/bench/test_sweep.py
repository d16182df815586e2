"""The load sweep: its steps, references, ratios, table and chart, with a fake server run
and a recording onnxruntime session (the real server run is the load generator's,
tested on its own and through the real gateway)."""

import argparse
import asyncio
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from embedgate.bench import cli, plot, sweep
from embedgate.bench.inprocess import LocalModel
from embedgate.bench.loadgen import LoadRun, RequestRecord
from embedgate.bench.report import load_summary

from .test_inprocess import RecordingSession


def fake_step_load(clients: int, payload: str, size: int) -> dict:
    """A step whose p50 grows with the clients and whose throughput is 100 x clients."""
    per_request = 1 if payload == "single" else size
    latency = 0.01 * clients * per_request
    records = [RequestRecord(i, per_request, latency, "200", embeddings=per_request) for i in range(10)]
    return load_summary(LoadRun(records, wall_s=10 * per_request / (100 * clients), concurrency=clients))


def run_sweep(minilm_tokenizer, clients=None):
    args = argparse.Namespace(seed=3, batch_size=8, sweep_clients=clients, model="m", sweep_limit_texts=sweep.LIMIT_TEXTS)
    session = RecordingSession()
    model = LocalModel(Path("model.onnx"), None, minilm_tokenizer, session, 0)
    sent = []

    async def server_run(step_args, step, before_load):
        before_load(None)
        sent.append((step_args.concurrency, step_args.payload, step_args.seed))
        step["load"] = fake_step_load(step_args.concurrency, step_args.payload, step_args.batch_size)
        step["memory"] = {"peak_mb": 250.0}

    report = {"config": {"model": "m"}}
    asyncio.run(sweep.run(args, report, server_run=server_run, open_model=lambda _: model, progress=lambda _: None))
    return report, sent, session


def test_each_payload_is_measured_at_each_client_count_with_inputs_of_its_own(minilm_tokenizer):
    report, sent, _ = run_sweep(minilm_tokenizer)
    assert [(c, p) for c, p, _ in sent] == [(1, "single"), (8, "single"), (64, "single"),
                                            (1, "batch"), (8, "batch"), (64, "batch")]
    seeds = [seed for _, _, seed in sent]
    assert len(set(seeds)) == 6 and 3 not in seeds  # the references' seed is none of them
    assert [(s["clients"], s["payload"]) for s in report["sweep"]["steps"]] == [(c, p) for c, p, _ in sent]
    assert run_sweep(minilm_tokenizer, [2, 4])[1][:2] == [(2, "single", 1003), (4, "single", 2003)]


def test_ratios_are_over_the_reference_of_the_requests_size_and_the_sorted_limit(minilm_tokenizer):
    report, _, _ = run_sweep(minilm_tokenizer)
    references = report["sweep"]["references"]
    limit = references["sorted_limit"]
    assert limit["embeddings_per_s"] == pytest.approx(sum(limit["runs_embeddings_per_s"]) / 2, abs=0.01)
    for step in report["sweep"]["steps"]:
        load = step["load"]
        reference = references["latency"][step["payload"]]["p50"]
        assert step["ratios"]["latency"] == round(load["response_time_s"]["p50"] / reference, 3)
        assert step["ratios"]["throughput"] == round(load["embeddings_per_s"] / limit["embeddings_per_s"], 3)
    targets = {(t["clients"], t["payload"], t["ratio"]): t for t in report["sweep"]["targets"]}
    assert set(targets) == {(1, "single", "latency"), (1, "batch", "latency"),
                            (64, "single", "throughput"), (64, "batch", "throughput")}
    steps = {(s["clients"], s["payload"]): s for s in report["sweep"]["steps"]}
    for (clients, payload, ratio), target in targets.items():
        value = steps[(clients, payload)]["ratios"][ratio]
        assert target["value"] == value
        assert target["met"] == (value <= 1.3 if payload == "single" else value <= 1.15) if ratio == "latency" \
            else target["met"] == (value >= 1.0)


def test_the_latency_references_embed_one_request_at_a_time_without_extra_padding(minilm_tokenizer):
    _, _, session = run_sweep(minilm_tokenizer)
    single = sweep.REFERENCE_REQUESTS["single"]
    batch = sweep.REFERENCE_REQUESTS["batch"]
    # Warm-up, then one call per request: singles first, then batches of 8.
    calls = session.shapes[: 1 + single + 1 + batch]
    assert [rows for rows, _ in calls] == [1] * (1 + single) + [8] * (1 + batch)
    # Each call is padded to its longest input, no further.
    offset = 0
    for rows, width in calls:
        assert width == max(session.rows[offset : offset + rows])
        offset += rows


def test_the_table_and_the_chart(minilm_tokenizer):
    report, _, _ = run_sweep(minilm_tokenizer)
    text = sweep.format_sweep(report)
    assert "| clients | request | p50 ms | p99 ms | embeddings/s | errors | peak MB" in text
    assert "| 64 | 8 sentences |" in text and "| 1 | 1 sentence |" in text
    assert text.count("(target ") == 4
    svg = ElementTree.fromstring(plot.sweep_svg(report))
    namespace = "{http://www.w3.org/2000/svg}"
    assert len(svg.findall(f"{namespace}polyline")) == 4  # two series in each panel
    dashed = [line for line in svg.findall(f"{namespace}line") if line.get("stroke-dasharray")]
    assert len(dashed) == 3 + 1  # two latency references, the sorted limit, the legend's


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--sweep", "--pretrained", "openai"], "--sweep measures a sentence-transformer model"),
        (["--sweep", "--payload", "long"], "--sweep measures a sentence-transformer model"),
        (["--sweep", "--requests", "5"], "--sweep measures a sentence-transformer model"),
        (["--sweep", "--sweep-clients", "0"], "--sweep-clients must be at least 1"),
        (["--sweep", "--sweep-limit-texts", "0"], "--sweep-limit-texts must be at least 1"),
        (["--sweep-clients", "4"], "go with --sweep"),
    ],
)
def test_sweep_options_are_checked(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_the_breakdown_splits_one_clients_p50_into_its_parts():
    step = {"load": {
        "response_time_s": {"p50": 0.0115},
        "server_timings_ms": {"total": 9.9, "inference": 7.2, "tokenize": 0.4, "queue": 0.3},
    }}
    parts = sweep.breakdown(step, {"model_run_one_thread": {"p50": 0.0045}})
    assert parts == {
        "p50": 11.5, "outside_the_gateway": 1.6, "gateway": 2.0, "tokenize": 0.4, "queue": 0.3,
        "triton_and_stub": 2.7, "model_run": 4.5,
    }
    total = sum(value for key, value in parts.items() if key != "p50")
    assert total == pytest.approx(parts["p50"])
    # Without the server's timing headers (another server) there is no breakdown.
    assert sweep.breakdown({"load": {"response_time_s": {"p50": 0.01}, "server_timings_ms": {}}}, {}) is None


def test_the_sweep_reports_the_breakdown_of_its_fewest_clients(minilm_tokenizer):
    report, _, session = run_sweep(minilm_tokenizer)
    assert report["sweep"]["references"]["model_run_one_thread"]["count"] == sweep.REFERENCE_REQUESTS["single"]
    assert report["sweep"]["breakdown"] is None  # the fake server sends no timing headers


def test_the_throughput_breakdown_splits_what_an_embedding_costs():
    step = {
        "clients": 64,
        "load": {"embeddings": 1200, "successful_requests": 600, "embeddings_per_s": 500.0},
        # Per request of two embeddings.
        "cpu_ms_per_request": {"triton": 5.0, "gateway": 1.0, "client": 0.2},
    }
    served = {"core_ms_per_text": 2.0, "rows_per_request": 14}
    parts = sweep.throughput_breakdown(step, served, limit_per_s=800.0, cores=2)
    assert parts == {
        "clients": 64, "embeddings_per_s": 500.0, "rows_per_model_request": 14,
        "model_run": 2.0, "triton_own": 0.5, "gateway": 0.5, "client": 0.1,
        "idle": 0.9,  # 2 cores x 1000 / 500 = 4 ms spent per embedding, 3.1 of them busy
        "sorted_limit": 2.5, "ratio_without_idle": round(2000 / 3.1 / 800, 3),
    }
    # Without the served model's measure or the processes' CPU there is no breakdown.
    assert sweep.throughput_breakdown(step, None, 800.0, 2) is None
    assert sweep.throughput_breakdown({**step, "cpu_ms_per_request": {}}, served, 800.0, 2) is None


def test_the_sweep_measures_the_served_model_on_batches_of_the_size_triton_ran(minilm_tokenizer):
    measured = []

    def measure_served(model, texts, rows):
        measured.append((len(texts), rows))
        return {"core_ms_per_text": 1.0, "rows_per_request": rows}

    args = argparse.Namespace(seed=3, batch_size=8, sweep_clients=[1, 4], model="m", sweep_limit_texts=sweep.LIMIT_TEXTS)
    model = LocalModel(Path("model.onnx"), None, minilm_tokenizer, RecordingSession(), 0)

    async def server_run(step_args, step, before_load):
        before_load(None)
        step["load"] = fake_step_load(step_args.concurrency, step_args.payload, step_args.batch_size)
        step["triton"] = {"average_batch_size": 3.6 * step_args.concurrency}
        step["cpu_ms_per_request"] = {"triton": 1.5, "gateway": 0.5, "client": 0.1}

    report = {"config": {"model": "m"}}
    asyncio.run(sweep.run(
        args, report, server_run=server_run, open_model=lambda _: model, progress=lambda _: None,
        measure_served=measure_served, cores=2,
    ))
    assert measured == [(sweep.LIMIT_TEXTS, 14)]  # the most clients' single sentences: 14.4 rows a run
    parts = report["sweep"]["throughput_breakdown"]
    assert parts["clients"] == 4 and parts["model_run"] == 1.0 and parts["triton_own"] == 0.5
    assert "4 clients, 1 sentence, 400 embeddings/s, per embedding in ms of a core: the model's runs 1.00" in (
        sweep.format_sweep(report)
    )
