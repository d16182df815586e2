"""Several processes' metrics as one: the texts of the gateway workers of one server
(and its primary's) summed into the text one process would give.

Counters, histograms and most gauges add up (requests, seconds, requests in flight, CPU
seconds, memory, the response caches' bytes). Gauges that every process reports alike
(Triton's state, which models are loaded and the memory they hold) take the largest value, and a process's start
time the earliest. A series only some processes have is kept as they report it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

# Families whose value is the same fact seen from every process.
SAME_IN_EVERY_PROCESS = frozenset(
    {
        "embedgate_triton_ready",
        "embedgate_triton_metrics_up",
        "embedgate_triton_restarts",
        "embedgate_model_loaded",
        "embedgate_model_memory_bytes",
        "embedgate_memory_budget_bytes",
        "process_max_fds",
    }
)
EARLIEST = frozenset({"process_start_time_seconds"})


class _Merged:
    def __init__(self, families: list[Metric]):
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def _combine(family: str, old: float, new: float) -> float:
    if family in SAME_IN_EVERY_PROCESS:
        return max(old, new)
    if family in EARLIEST:
        return min(old, new)
    return old + new


def merged(texts: Iterable[bytes]) -> bytes:
    """One text of every family in ``texts``, each series combined across them."""
    texts = list(texts)
    if len(texts) == 1:
        return texts[0]
    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple, float]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text.decode()):
            families.setdefault(family.name, Metric(family.name, family.documentation, family.type))
            series = values.setdefault(family.name, {})
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                series[key] = sample.value if key not in series else _combine(family.name, series[key], sample.value)
    out = []
    for name, family in families.items():
        for (sample_name, labels), value in values[name].items():
            family.add_sample(sample_name, dict(labels), value)
        out.append(family)
    return generate_latest(_Merged(out))
