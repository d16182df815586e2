"""``--compare-endpoints``: each endpoint's run in one table, its gateway CPU per request and
throughput as ratios of the first endpoint's."""

from __future__ import annotations

import argparse

from embedgate.bench import transports


def report(endpoint: str, rate: float, gateway_ms: float) -> dict:
    return {
        "config": {"endpoint": endpoint},
        "load": {"embeddings_per_s": rate, "errors": {"429": 2}, "response_time_s": {"p50": 0.01, "p99": 0.02}},
        "cpu_ms_per_request": {"gateway": gateway_ms, "triton": 4.0},
    }


def test_the_table_holds_each_endpoint_against_the_first():
    result = transports.side_by_side([report("/tei/embed", 200.0, 0.4), report("grpc-stream", 180.0, 0.44)])
    first, stream = result["endpoints"]
    assert (first["gateway_cpu_ratio"], first["throughput_ratio"]) == (1.0, 1.0)
    assert (stream["gateway_cpu_ratio"], stream["throughput_ratio"]) == (1.1, 0.9)
    assert stream["errors"] == 2 and stream["p50_ms"] == 10.0
    text = transports.format_side_by_side(result)
    assert "grpc-stream | 180.0 | 10.0 / 20.0 | 2 | 0.440 | 1.10x, 0.90x" in text


def test_each_endpoint_runs_on_inputs_of_its_own_without_loading_again():
    seen = []

    def measure(args, into):
        seen.append((args.endpoint, args.seed, args.no_load, args.inprocess))
        into.update(report(args.endpoint, 100.0, 0.5))

    args = argparse.Namespace(endpoint="/tei/embed", seed=7, no_load=False, inprocess=True,
                              compare_endpoints=["grpc", "grpc-stream"])
    result = transports.run(args, report("/tei/embed", 100.0, 0.5), measure, lambda a: {"endpoint": a.endpoint})
    assert seen == [("grpc", 8, True, False), ("grpc-stream", 9, True, False)]
    assert [row["endpoint"] for row in result["endpoints"]] == ["/tei/embed", "grpc", "grpc-stream"]
