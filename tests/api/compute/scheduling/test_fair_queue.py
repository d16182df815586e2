"""Where a key's request goes in a model's queue: a key within its share of the queued
work goes ahead of the run of requests at the back that belong to keys over theirs; any
other request (a key over its share, anonymous requests, a key alone) goes to the back."""

from dataclasses import dataclass

from embedgate.api.compute.scheduling.fair_queue import KeyShares


@dataclass
class Waiting:
    key: str | None
    weight: float


def queue_of(*waiting):
    shares = KeyShares()
    for entry in waiting:
        shares.add(entry.key, entry.weight)
    return list(waiting), shares


def test_a_light_key_goes_ahead_of_a_flooding_keys_requests():
    queue, shares = queue_of(*(Waiting("a", 50) for _ in range(3)))
    assert shares.place(queue, "b", 10) == 0


def test_a_light_keys_next_request_goes_after_its_own_and_before_the_flood():
    queue, shares = queue_of(Waiting("a", 50), Waiting("b", 10), Waiting("a", 50), Waiting("a", 50))
    assert shares.place(queue, "b", 10) == 2


def test_a_key_over_its_share_a_key_alone_and_anonymous_requests_go_to_the_back():
    queue, shares = queue_of(Waiting("a", 50), Waiting("b", 10), Waiting("a", 50))
    assert shares.place(queue, "a", 50) == 3  # 150 of 160: over half
    assert shares.place(queue, "b", 100) == 3  # 110 of 210: over half
    assert shares.place(queue, None, 1) == 3
    alone, shares = queue_of(Waiting("a", 50))
    assert shares.place(alone, "a", 50) == 1
    assert KeyShares().place([], "a", 1) == 0


def test_requests_that_leave_the_queue_leave_their_keys_share():
    queue, shares = queue_of(Waiting("a", 50), Waiting("a", 50))
    shares.remove("a", 50)
    shares.remove("a", 50)
    assert shares.place([], "b", 10) == 0
    shares.reset([("b", 5.0), ("c", 100.0), (None, 7.0)])
    assert shares.place([Waiting("b", 5), Waiting("c", 100)], "b", 5) == 1
