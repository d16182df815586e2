"""--compare-model: the second run's report, the rows and the ratios (no server)."""

import pytest

from embedgate.bench import cli, compare
from embedgate.bench.compare import comparison, format_comparison


def _report(model: str, embeddings_per_s: float, p50: float, parity: float | None, onnx_mb: float) -> dict:
    return {
        "config": {"model": model, "payload": "batch", "per_request": 32, "endpoint": "/infer"},
        "model": {"parity_min_cosine": parity} if parity is not None else {},
        "load": {
            "embeddings_per_s": embeddings_per_s,
            "response_time_s": {"p50": p50, "p99": p50 * 2},
        },
        "inprocess": {
            "onnx_mb": onnx_mb,
            "baselines": {"plain": {"embeddings_per_s": embeddings_per_s / 2}, "length_sorted": {"embeddings_per_s": 100.0}},
        },
    }


def test_rows_and_ratios():
    int8 = _report("m@int8", 600.0, 0.5, 0.9957, 73.3)
    plain = _report("m", 400.0, 0.75, 0.99999, 90.4)
    result = comparison(int8, plain)
    assert [row["model"] for row in result["models"]] == ["m@int8", "m"]
    first = result["models"][0]
    assert (first["p50_ms"], first["p99_ms"], first["onnx_mb"], first["parity_min_cosine"]) == (500.0, 1000.0, 73.3, 0.9957)
    assert result["throughput_ratio"] == {"server": 1.5, "inprocess_plain": 1.5, "inprocess_length_sorted": 1.0}


def test_missing_figures_are_left_out_not_invented():
    bare = {"config": {"model": "a"}, "load": {"embeddings_per_s": 0.0, "response_time_s": None}}
    result = comparison(bare, {"config": {"model": "b"}})
    assert result["throughput_ratio"] == {}
    assert result["models"][0]["p50_ms"] is None and result["models"][1]["onnx_mb"] is None


def test_the_printed_comparison_names_both_models(monkeypatch):
    # The second run's own summary is report.format_summary's (tested with it).
    monkeypatch.setattr(compare, "format_summary", lambda report: f"summary of {report['config']['model']}")
    int8, plain = _report("m@int8", 600.0, 0.5, 0.9957, 73.3), _report("m", 400.0, 0.75, None, 90.4)
    report = {**int8, "compare": plain, "comparison": comparison(int8, plain)}
    text = format_comparison(report)
    assert "the same run against m\nsummary of m\n" in text
    assert "m@int8 | 600.0 | 500.0 / 1000.0 | 0.995700 | 73.3" in text
    assert "m | 400.0 | 750.0 / 1500.0 | n/a | 90.4" in text
    assert "Throughput m@int8 / m (server): 1.500x" in text


@pytest.mark.parametrize(
    "argv",
    [
        ["--compare-model", "m", "--model", "m"],
        ["--compare-model", "m", "--inprocess-only", "--requests", "5"],
        ["--compare-model", "m", "--pretrained", "openai"],
    ],
)
def test_compare_needs_a_server_run_of_another_text_model(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert "--compare-model needs" in capsys.readouterr().err
