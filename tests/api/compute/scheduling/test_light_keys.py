"""Which keys share a coalescer and which are light: keys seen within the window share it; a
key is light while its work, waiting and in calls, is within its share of all the keys';
anonymous requests never are."""

from dataclasses import dataclass

from embedgate.api.compute.scheduling.fair_queue import KeyShares
from embedgate.api.compute.scheduling.light_keys import LightKeys


@dataclass
class Waiter:
    key: str | None
    weight: float


def queued(*waiting: tuple[str | None, float]) -> KeyShares:
    shares = KeyShares()
    shares.reset(waiting)
    return shares


def test_keys_share_while_more_than_one_was_seen_within_the_window():
    keys = LightKeys(window_s=10)
    keys.seen("a", 0.0)
    assert not keys.sharing(1.0)
    keys.seen("b", 2.0)
    assert keys.sharing(9.0)
    keys.seen("a", 11.5)  # seen again: the window starts again for it
    assert keys.sharing(12.0)  # b was seen 10 s ago: still in
    assert not keys.sharing(12.5)  # b forgotten
    keys.seen("b", 13.0)
    assert keys.sharing(13.0)


def test_a_key_within_its_share_of_the_work_is_light_and_one_over_it_is_not():
    keys = LightKeys()
    keys.seen("a", 0.0)
    keys.seen("b", 0.0)
    keys.sent([Waiter("a", 64.0), Waiter("a", 64.0)])
    light = keys.judge(queued(("a", 100.0), ("b", 1.0)))
    assert light("b") and not light("a")
    assert not light(None)  # anonymous requests: first come, first served


def test_work_in_calls_counts_until_its_call_ends():
    keys = LightKeys()
    keys.seen("a", 0.0)
    keys.seen("b", 0.0)
    in_call = [Waiter("b", 50.0)]
    keys.sent(in_call)
    assert not keys.judge(queued(("a", 10.0), ("b", 1.0)))("b")  # 51 of 61: over half
    keys.ended(in_call)
    assert keys.judge(queued(("a", 10.0), ("b", 1.0)))("b")


def test_a_key_seen_lately_with_no_work_counts_in_the_shares():
    keys = LightKeys()
    keys.seen("a", 0.0)
    keys.seen("b", 0.0)
    work = queued(("a", 50.0), ("b", 40.0))
    assert keys.judge(work)("b")  # 40 of 90: within half
    keys.seen("c", 1.0)
    light = keys.judge(work)
    assert not light("b") and light("c")  # past a third: c, seen, has a share too


def test_the_verdicts_stay_as_the_work_stood_while_a_call_forms():
    keys = LightKeys()
    keys.seen("a", 0.0)
    keys.seen("b", 0.0)
    shares = queued(("a", 30.0), ("b", 20.0))
    light = keys.judge(shares)
    assert not light("a")
    shares.remove("a", 30.0)  # the call took a's requests: b alone would be over half now
    assert not light("a") and light("b")
