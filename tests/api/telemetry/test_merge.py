"""Several processes' metrics texts as one, read back with prometheus_client's parser."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from embedgate.api.telemetry.merge import merged


def process_text(requests: int, seconds: list[float], inflight: int, ready: int, started: float) -> bytes:
    registry = CollectorRegistry()
    Counter("embedgate_requests", "h", ["endpoint"], registry=registry).labels("/infer").inc(requests)
    histogram = Histogram("embedgate_request_duration_seconds", "h", buckets=(0.1, 1.0), registry=registry)
    for value in seconds:
        histogram.observe(value)
    Gauge("embedgate_inflight_requests", "h", ["model"], registry=registry).labels("m").set(inflight)
    Gauge("embedgate_triton_ready", "h", registry=registry).set(ready)
    Gauge("process_start_time_seconds", "h", registry=registry).set(started)
    return generate_latest(registry)


def samples(text: bytes) -> dict[tuple, float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }


def test_counters_histograms_and_gauges_add_up_and_shared_facts_do_not():
    first = process_text(3, [0.05, 0.5], inflight=2, ready=1, started=100.0)
    second = process_text(4, [2.0], inflight=5, ready=1, started=90.0)
    found = samples(merged([first, second]))
    assert found[("embedgate_requests_total", (("endpoint", "/infer"),))] == 7
    assert found[("embedgate_request_duration_seconds_count", ())] == 3
    assert found[("embedgate_request_duration_seconds_bucket", (("le", "0.1"),))] == 1
    assert found[("embedgate_request_duration_seconds_bucket", (("le", "+Inf"),))] == 3
    assert found[("embedgate_request_duration_seconds_sum", ())] == 2.55
    assert found[("embedgate_inflight_requests", (("model", "m"),))] == 7
    # The same fact seen from two processes is one fact; the server began with its first.
    assert found[("embedgate_triton_ready", ())] == 1
    assert found[("process_start_time_seconds", ())] == 90.0


def test_one_text_is_left_as_it_is_and_series_of_one_process_are_kept():
    only = process_text(1, [], inflight=0, ready=0, started=1.0)
    assert merged([only]) == only
    registry = CollectorRegistry()
    Counter("embedgate_conversion", "h", ["library"], registry=registry).labels("st").inc()
    found = samples(merged([only, generate_latest(registry)]))
    assert found[("embedgate_conversion_total", (("library", "st"),))] == 1
    assert found[("embedgate_requests_total", (("endpoint", "/infer"),))] == 1
