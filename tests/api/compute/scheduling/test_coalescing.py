"""Coalescer: requests that wait while every slot is busy leave together in one call."""

import asyncio

import pytest

from embedgate.api.compute.scheduling.coalescing import Coalescer
from embedgate.api.compute.scheduling.tenants import Tenant, serve_as


def share(merged, rows, arrived):
    return merged[rows]


class Calls:
    """A fake sender: records each call's items and timeout; each call waits for its own
    release, so a test decides when calls finish."""

    share = staticmethod(share)

    def __init__(self):
        self.items: list[list[str]] = []
        self.timeouts: list[float] = []
        self.releases: list[asyncio.Event] = []
        self.fail_with: Exception | None = None

    async def send(self, items, timeout_s):
        self.items.append(list(items))
        self.timeouts.append(timeout_s)
        release = asyncio.Event()
        self.releases.append(release)
        await release.wait()
        if self.fail_with is not None:
            raise self.fail_with
        return [item.upper() for item in items]

    async def started(self, count):
        while len(self.items) < count:
            await asyncio.sleep(0)


def coalescer(calls, *, max_rows=100, max_in_flight=1):
    return Coalescer(calls, max_rows=max_rows, max_in_flight=max_in_flight)


def as_key(tenant, submit):
    async def request():
        serve_as(tenant)  # as the key check does, in the request's own task
        return await submit()

    return asyncio.create_task(request())


async def behind_a_busy_call(calls, merged, *waiting, first_timeout=5):
    """A first request takes the only slot; then ``waiting`` ((items, timeout) pairs)
    queue behind it. Returns the first request's task and theirs."""
    first = asyncio.create_task(merged.submit(["first"], first_timeout))
    await calls.started(1)
    tasks = [asyncio.create_task(merged.submit(items, timeout)) for items, timeout in waiting]
    await asyncio.sleep(0)
    return first, tasks


async def test_a_lone_request_leaves_at_once_with_its_own_items():
    calls = Calls()
    merged = coalescer(calls)
    request = asyncio.create_task(merged.submit(["a", "b"], 5))
    await calls.started(1)
    assert calls.items == [["a", "b"]]
    calls.releases[0].set()
    assert await request == ["A", "B"]
    assert merged.in_flight == 0


async def test_requests_waiting_for_a_slot_leave_together_and_get_their_own_rows():
    calls = Calls()
    merged = coalescer(calls, max_in_flight=1)
    first, waiting = await behind_a_busy_call(calls, merged, (["b", "c"], 5), (["d"], 5), (["e", "f", "g"], 5))
    assert len(calls.items) == 1  # the slot is taken: they wait
    calls.releases[0].set()
    await calls.started(2)
    assert calls.items[1] == ["b", "c", "d", "e", "f", "g"]
    calls.releases[1].set()
    assert await first == ["FIRST"]
    assert [await task for task in waiting] == [["B", "C"], ["D"], ["E", "F", "G"]]


async def test_a_call_carries_at_most_max_rows_and_the_rest_take_the_next_slot():
    calls = Calls()
    merged = coalescer(calls, max_rows=3, max_in_flight=2)
    tasks = [asyncio.create_task(merged.submit(items, 5)) for items in (["a"], ["b", "c"], ["d", "e"], ["f"])]
    await calls.started(2)
    # Two slots: the first request alone (the second had not arrived yet when it left),
    # then as many of the rest as fit in three rows.
    assert calls.items == [["a"], ["b", "c"]]
    calls.releases[0].set()
    await calls.started(3)
    assert calls.items[2] == ["d", "e", "f"]
    for release in calls.releases:
        release.set()
    assert [await task for task in tasks] == [["A"], ["B", "C"], ["D", "E"], ["F"]]


async def test_a_call_takes_an_equal_share_per_slot_so_calls_stay_about_the_same_size():
    calls = Calls()
    merged = coalescer(calls, max_rows=100, max_in_flight=2)
    busy = [asyncio.create_task(merged.submit([name], 5)) for name in ("a", "b")]
    await calls.started(2)
    waiting = [asyncio.create_task(merged.submit([name], 5)) for name in "cdefgh"]
    await asyncio.sleep(0)
    # Eight texts for two slots: the slot that frees first takes four, not all six
    # waiting, and the other slot the remaining two.
    calls.releases[0].set()
    await calls.started(3)
    assert calls.items[2] == ["c", "d", "e", "f"]
    calls.releases[1].set()
    await calls.started(4)
    assert calls.items[3] == ["g", "h"]
    for release in calls.releases:
        release.set()
    assert [await task for task in busy + waiting] == [[name.upper()] for name in "abcdefgh"]
    assert merged.in_flight == 0


async def test_a_request_larger_than_max_rows_still_leaves_alone():
    calls = Calls()
    merged = coalescer(calls, max_rows=2)
    task = asyncio.create_task(merged.submit(["a", "b", "c"], 5))
    await calls.started(1)
    calls.releases[0].set()
    assert await task == ["A", "B", "C"]


async def test_a_request_cancelled_while_waiting_is_left_out_of_the_call():
    calls = Calls()
    merged = coalescer(calls)
    first, (gone, kept) = await behind_a_busy_call(calls, merged, (["gone"], 5), (["kept"], 5))
    gone.cancel()
    calls.releases[0].set()
    await calls.started(2)
    assert calls.items[1] == ["kept"]
    calls.releases[1].set()
    assert await kept == ["KEPT"]
    await first
    with pytest.raises(asyncio.CancelledError):
        await gone


async def test_a_request_cancelled_during_its_call_does_not_stop_the_others():
    calls = Calls()
    merged = coalescer(calls)
    busy, (leaving, staying) = await behind_a_busy_call(calls, merged, (["leaving"], 5), (["staying"], 5))
    calls.releases[0].set()
    await calls.started(2)
    leaving.cancel()
    await asyncio.sleep(0)
    calls.releases[1].set()
    assert await staying == ["STAYING"]
    await busy
    with pytest.raises(asyncio.CancelledError):
        await leaving
    assert merged.in_flight == 0


async def test_a_failed_call_fails_each_of_its_requests_with_the_error():
    calls = Calls()
    merged = coalescer(calls)
    first, others = await behind_a_busy_call(calls, merged, (["b"], 5), (["c"], 5))
    calls.fail_with = RuntimeError("triton said no")
    calls.releases[0].set()
    await calls.started(2)
    calls.releases[1].set()
    for task in (first, *others):
        with pytest.raises(RuntimeError, match="triton said no"):
            await task
    # The service goes on: the next request gets its own call.
    calls.fail_with = None
    again = asyncio.create_task(merged.submit(["d"], 5))
    await calls.started(3)
    calls.releases[2].set()
    assert await again == ["D"]


async def test_a_merged_call_lasts_as_long_as_its_most_patient_request():
    calls = Calls()
    merged = coalescer(calls)
    first, tasks = await behind_a_busy_call(calls, merged, (["b"], 2), (["c"], 30), first_timeout=1)
    calls.releases[0].set()
    await calls.started(2)
    assert calls.timeouts[0] == pytest.approx(1, abs=0.1)
    assert calls.timeouts[1] == pytest.approx(30, abs=0.5)
    calls.releases[1].set()
    await asyncio.gather(first, *tasks)


async def test_close_cancels_calls_and_waiting_requests():
    calls = Calls()
    merged = coalescer(calls)
    running, (waiting,) = await behind_a_busy_call(calls, merged, (["b"], 5))
    merged.close()
    for task in (running, waiting):
        with pytest.raises(asyncio.CancelledError):
            await task


def bulk_coalescer(calls, **options):
    settings = {"max_rows": 100, "max_in_flight": 3, "bulk_slots": 2, "bulk_busy_rows": 2, "bulk_idle_rows": 6,
                "quiet_s": 0.0, **options}
    return Coalescer(calls, **settings)


async def settle():
    for _ in range(5):
        await asyncio.sleep(0)


async def test_bulk_work_fills_the_idle_slots_but_never_the_last_and_grows_when_online_is_quiet():
    calls = Calls()
    merged = bulk_coalescer(calls)
    bulk = asyncio.create_task(merged.submit_bulk([[f"b{i}"] for i in range(10)], 60))
    await calls.started(2)
    await settle()
    # Two bulk calls (bulk_slots), each of bulk_idle_rows: nobody online, the last slot free.
    assert calls.items == [["b0", "b1", "b2", "b3", "b4", "b5"], ["b6", "b7", "b8", "b9"]]
    online = asyncio.create_task(merged.submit(["o"], 5))
    await calls.started(3)
    assert calls.items[2] == ["o"]  # the free slot: an online request leaves at once
    for release in calls.releases:
        release.set()
    assert await online == ["O"]
    assert await bulk == [[f"B{i}"] for i in range(10)]


async def test_online_requests_go_first_and_bulk_calls_stay_small_while_they_come():
    calls = Calls()
    merged = bulk_coalescer(calls, quiet_s=60.0, max_in_flight=2, bulk_slots=2)
    online = [asyncio.create_task(merged.submit([f"o{i}"], 5)) for i in range(2)]
    bulk = asyncio.create_task(merged.submit_bulk([[f"b{i}"] for i in range(4)], 60))
    await calls.started(1)
    await settle()
    # One online call takes o0 (and o1 waits, or rides along); no bulk call while online waits.
    assert all(not item.startswith("b") for call in calls.items for item in call)
    while not all(task.done() for task in online):
        for release in calls.releases:
            release.set()
        await settle()
    await settle()
    # Online requests came recently: bulk calls carry bulk_busy_rows (2) texts.
    bulk_calls = [call for call in calls.items if call[0].startswith("b")]
    assert bulk_calls and all(len(call) <= 2 for call in bulk_calls)
    while not bulk.done():
        for release in calls.releases:
            release.set()
        await settle()
    assert bulk.result() == [[f"B{i}"] for i in range(4)]


async def test_with_one_slot_bulk_work_still_runs_when_nothing_else_does():
    calls = Calls()
    merged = bulk_coalescer(calls, max_in_flight=1, bulk_slots=1)
    task = asyncio.create_task(merged.submit_bulk([["b"]], 60))
    await calls.started(1)
    calls.releases[0].set()
    assert await task == [["B"]]


FLOOD, LIGHT = Tenant("a-hash", "a"), Tenant("b-hash", "b")


async def flooded(calls, merged, count=8):
    """Key a's requests, one text each, all submitted."""
    flood = [as_key(FLOOD, lambda n=n: merged.submit([f"a{n}"], 5)) for n in range(count)]
    await settle()
    return flood


async def answered(calls, *tasks):
    while not all(task.done() for task in tasks):
        for release in calls.releases:
            release.set()
        await settle()
    return [task.result() for task in tasks]


async def test_while_keys_share_the_flood_leaves_the_last_slot_and_a_light_request_leaves_in_it_alone():
    calls = Calls()
    merged = coalescer(calls, max_in_flight=3)
    assert await answered(calls, as_key(LIGHT, lambda: merged.submit(["hello"], 5))) == [["HELLO"]]
    flood = await flooded(calls, merged)
    # b was seen a moment ago: one call per instance for the flood, none waiting for a third.
    assert calls.items[1:] == [["a0"], ["a1"]]
    light = as_key(LIGHT, lambda: merged.submit(["b"], 5))
    await calls.started(4)
    assert calls.items[3] == ["b"]  # at once, alone
    calls.releases[3].set()
    assert await light == ["B"]
    calls.releases[1].set()
    await calls.started(5)
    # Half an equal share of the seven texts for three slots: a call that frees its
    # instance sooner for the next light request.
    assert calls.items[4] == ["a2", "a3"]
    assert await answered(calls, *flood) == [[f"A{n}"] for n in range(8)]
    assert merged.in_flight == 0


@pytest.mark.parametrize("light_was_here", [False, True])
async def test_a_flood_alone_takes_every_slot_and_so_it_does_once_the_other_key_is_gone(light_was_here):
    calls = Calls()
    merged = Coalescer(calls, max_rows=100, max_in_flight=3, sharing_window_s=0.01)
    if light_was_here:
        assert await answered(calls, as_key(LIGHT, lambda: merged.submit(["hello"], 5))) == [["HELLO"]]
        await asyncio.sleep(0.03)  # past the window: b is forgotten
    flood = await flooded(calls, merged)
    assert calls.items[light_was_here:] == [["a0"], ["a1"], ["a2"]]
    assert await answered(calls, *flood) == [[f"A{n}"] for n in range(8)]


async def test_a_light_keys_request_never_rides_in_a_heavy_keys_call():
    calls = Calls()
    merged = coalescer(calls, max_in_flight=1)
    flood = await flooded(calls, merged, count=3)
    light = as_key(LIGHT, lambda: merged.submit(["b"], 5))
    await settle()
    calls.releases[0].set()
    await calls.started(2)
    assert calls.items[1] == ["b"]  # ahead of the flood, and without it
    assert await answered(calls, light, *flood) == [["B"], ["A0"], ["A1"], ["A2"]]
    assert calls.items[2:] == [["a1"], ["a2"]]  # half an equal share each: one
