"""``benchmark.py --job``: each phase sends inputs no earlier phase sent (the response cache
would answer a repeat instead of the model)."""

from __future__ import annotations

from embedgate.bench.job import Seeds, texts_of
from embedgate.bench.payloads import SentencePayload


def online_texts(seed: int, count: int) -> set[str]:
    # What ``online`` sends: a warm-up from index 0, then the measured requests from 1,000,000.
    payload = SentencePayload(per_request=1, seed=seed)
    indices = [*range(count), *range(1_000_000, 1_000_000 + count)]
    return {text for index in indices for text in payload.inputs(index)}


def test_the_phases_of_one_run_share_no_input():
    seeds = Seeds.of(7)
    phases = {
        "job": set(texts_of(500, seeds.job)),
        "background": set(texts_of(500, seeds.background)),
        "alone": online_texts(seeds.alone, 500),
        "beside": online_texts(seeds.beside, 500),
    }
    names = list(phases)
    for at, name in enumerate(names):
        for other in names[at + 1 :]:
            assert not phases[name] & phases[other], f"the {name} and {other} phases send the same texts"
