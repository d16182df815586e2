"""Coalescer: requests that wait while every slot is busy leave together in one call."""

import asyncio

import pytest

from embedgate.api.compute.scheduling.coalescing import Coalescer
from embedgate.api.compute.scheduling.pacing import Pace
from embedgate.api.compute.scheduling.tenants import Tenant, serve_as
from embedgate.api.errors import Overloaded


class Calls:
    """A fake ``work``: records each call's items and timeout; each call waits for its
    own release, so a test decides when calls finish."""

    def __init__(self):
        self.items: list[list[str]] = []
        self.timeouts: list[float] = []
        self.releases: list[asyncio.Event] = []
        self.fail_with: Exception | None = None

    async def work(self, items, timeout_s):
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


def share(merged, rows, arrived):
    return merged[rows]


def coalescer(calls, *, max_rows=100, max_in_flight=1):
    return Coalescer(calls.work, share, max_rows=max_rows, max_in_flight=max_in_flight)


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
    return Coalescer(calls.work, share, **settings)


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


class FixedPace(Pace):
    """A speed the test sets (the real one moves with every call)."""

    def __init__(self, unit_s, instances=1):
        super().__init__(instances)
        self.unit_s = unit_s
        self.served = []

    def call_served(self, cost, seconds):
        self.served.append((cost, seconds))


def units(items):
    # Each item costs its length in units, so the arithmetic below is exact.
    return float(sum(len(item) for item in items))


def paced(calls, unit_s, *, instances=1, max_rows=100, deadline_share=0.8):
    return Coalescer(
        calls.work, share, max_rows=max_rows, max_in_flight=instances, pace=FixedPace(unit_s, instances),
        cost=units, deadline_share=deadline_share, name="model 'm'",
    )


async def test_a_request_whose_call_would_finish_past_its_deadline_is_refused_at_once():
    calls = Calls()
    merged = paced(calls, unit_s=0.01)
    first = asyncio.create_task(merged.submit(["x" * 50], 5))  # nothing ahead: always admitted
    await calls.started(1)
    # Its call starts when the running one ends (0.5 s) and takes 0.6 s: 1.1 s.
    with pytest.raises(Overloaded) as refused:
        await merged.submit(["y" * 60], 1.0)  # 1.1 s > 80% of 1 s
    assert refused.value.retry_after_s == 1
    assert "about 1s of work queued" in refused.value.message and "80% of its 1s deadline" in refused.value.message
    admitted = asyncio.create_task(merged.submit(["y" * 60], 2.0))  # 1.1 s <= 1.6 s
    await asyncio.sleep(0)
    assert not admitted.done()
    calls.releases[0].set()
    await calls.started(2)
    calls.releases[1].set()
    assert await first == ["X" * 50] and await admitted == ["Y" * 60]
    assert calls.items == [["x" * 50], ["y" * 60]]  # the refused request never reached the model


async def test_the_retry_after_says_when_enough_of_the_queue_will_have_drained():
    calls = Calls()
    merged = paced(calls, unit_s=0.1)
    first = asyncio.create_task(merged.submit(["x" * 100], 5))
    await calls.started(1)
    with pytest.raises(Overloaded) as refused:
        await merged.submit(["y" * 100], 5)  # 10 s + 10 s against 4 s allowed
    assert refused.value.retry_after_s == 16
    first.cancel()


async def test_the_last_call_of_the_queue_is_counted_on_one_instance():
    calls = Calls()
    # Two instances, calls of at most two requests: 1 s each.
    merged = paced(calls, unit_s=0.01, instances=2, max_rows=2)
    running = [asyncio.create_task(merged.submit([c * 50, c * 50], 30)) for c in "ab"]
    await calls.started(2)
    waiting = [asyncio.create_task(merged.submit([c * 50, c * 50], 30)) for c in "cd"]
    await asyncio.sleep(0)
    # The work ahead is 4 s and its own 1 s: 2.5 s spread over both instances. But its call
    # is the fifth, the queue's last, alone on the instance that frees first: 2 + 1 s.
    with pytest.raises(Overloaded) as refused:
        await merged.submit(["e" * 50, "e" * 50], 3.5)  # 3 s > 80% of 3.5 s
    assert "about 3s of work queued" in refused.value.message
    admitted = asyncio.create_task(merged.submit(["e" * 50, "e" * 50], 3.9))  # 3 s <= 3.12 s
    await asyncio.sleep(0)
    assert not admitted.done()
    for task in running + waiting + [admitted]:
        task.cancel()


async def test_a_call_waiting_in_tritons_queue_is_timed_from_when_an_instance_takes_it():
    calls = Calls()
    pace = FixedPace(0.001, instances=1)
    merged = Coalescer(calls.work, share, max_rows=1, max_in_flight=2, pace=pace, cost=units)
    first = asyncio.create_task(merged.submit(["x" * 10], 30))
    second = asyncio.create_task(merged.submit(["y" * 20], 30))
    await calls.started(2)  # both sent: the second waits in Triton's queue
    assert [call.started is not None for call in merged._running] == [True, False]
    await asyncio.sleep(0.05)  # the second call has waited this long
    loop = asyncio.get_running_loop()
    freed = loop.time()
    calls.releases[0].set()
    await first
    assert merged._running[0].started is not None and merged._running[0].started >= freed
    calls.releases[1].set()
    await second
    ended = loop.time()
    (first_cost, _), (second_cost, second_s) = pace.served
    assert (first_cost, second_cost) == (10, 20)
    assert second_s <= ended - freed  # not counting its wait behind the first


async def test_a_waiting_request_that_can_no_longer_make_its_deadline_is_refused_before_any_work():
    calls = Calls()
    merged = paced(calls, unit_s=0.01)
    first = asyncio.create_task(merged.submit(["x" * 50], 5))
    await calls.started(1)
    late = asyncio.create_task(merged.submit(["y" * 20], 1.0))  # 0.5 + 0.2 s: admitted
    patient = asyncio.create_task(merged.submit(["z" * 10], 30))
    await asyncio.sleep(0)
    merged.pace.unit_s = 0.1  # the model turned out slower: their call now takes 3 s, past 1 s
    calls.releases[0].set()
    with pytest.raises(Overloaded) as shed:
        await late
    assert "can no longer answer this request within its deadline" in shed.value.message
    assert shed.value.retry_after_s >= 2
    await calls.started(2)
    calls.releases[1].set()
    assert await first == ["X" * 50] and await patient == ["Z" * 10]
    assert calls.items == [["x" * 50], ["z" * 10]]  # no work for the request that was shed


async def test_without_a_pace_requests_are_admitted_by_count_alone():
    calls = Calls()
    merged = coalescer(calls)
    first = asyncio.create_task(merged.submit(["x" * 5000], 5))
    await calls.started(1)
    waiting = asyncio.create_task(merged.submit(["y" * 5000], 0.001))
    await asyncio.sleep(0)
    assert not waiting.done()
    calls.releases[0].set()
    await first
    waiting.cancel()


async def test_the_later_parts_of_an_admitted_request_are_not_refused():
    calls = Calls()
    merged = paced(calls, unit_s=0.1)
    # One request in two parts: the first finds the instance free; the second waits behind
    # it (10 s of work), which would refuse it on its own with a 1 s deadline.
    parts = [asyncio.create_task(merged.submit(["x" * 100], 1.0)),
             asyncio.create_task(merged.submit(["y" * 100], 1.0, admitted=True))]
    await calls.started(1)
    with pytest.raises(Overloaded):
        await merged.submit(["z" * 100], 1.0)
    calls.releases[0].set()
    await calls.started(2)
    calls.releases[1].set()
    assert [await part for part in parts] == [["X" * 100], ["Y" * 100]]


async def test_a_burst_after_lone_sentences_is_not_refused_on_their_calls_speed():
    # Lone one-sentence calls are slow per unit (their time is a call's fixed cost, here
    # also the event loop's lag): read, a forecast of the burst's 40 sentences would be
    # 40 x 0.1 s, past 80% of 1 s, though the merged calls that serve it take 10 ms.
    calls = Calls()
    merged = Coalescer(
        calls.work, share, max_rows=100, max_in_flight=1, pace=Pace(1), cost=units, deadline_share=0.8,
        name="model 'm'",
    )
    for lone in range(3):  # the first is never read; the others are lone sentences
        task = asyncio.create_task(merged.submit(["s" * 12], 30))
        await calls.started(lone + 1)
        await asyncio.sleep(0.1)
        calls.releases[lone].set()
        await task
    assert merged.pace.unit_s is None
    first = asyncio.create_task(merged.submit(["s" * 12], 1.0))
    await calls.started(4)
    burst = [asyncio.create_task(merged.submit([f"{i:02d}" + "s" * 10], 1.0)) for i in range(40)]
    await asyncio.sleep(0)
    assert not any(task.done() for task in burst), "refused on the lone calls' speed"
    calls.releases[3].set()
    await calls.started(5)
    calls.releases[4].set()
    assert await first == ["S" * 12]
    assert await asyncio.gather(*burst) == [[f"{i:02d}" + "S" * 10] for i in range(40)]
    assert len(calls.items[4]) == 40  # the burst went in one merged call
    assert merged.pace.unit_s == pytest.approx(0.0, abs=0.01)  # and that call, of 480 units, was read


def as_key(tenant, submit):
    async def request():
        serve_as(tenant)  # as the key check does, in the request's own task
        return await submit()

    return asyncio.create_task(request())


async def test_a_light_key_goes_ahead_of_a_flooding_keys_queue_and_is_answered_in_time():
    calls = Calls()
    merged = paced(calls, unit_s=0.01, max_rows=1)
    flood, light = Tenant("a-hash", "a"), Tenant("b-hash", "b")
    first = as_key(flood, lambda: merged.submit(["x" * 50], 5))
    await calls.started(1)
    queued = [as_key(flood, lambda n=n: merged.submit([f"{n}" * 50], 5)) for n in range(3)]
    await asyncio.sleep(0)
    # At the back it would end after 0.5 s running and 1.5 s queued: past 80% of 1 s.
    # Ahead of the flood, its call ends at 0.6 s.
    light_request = as_key(light, lambda: merged.submit(["b" * 10], 1.0))
    await asyncio.sleep(0)
    assert not light_request.done()
    calls.releases[0].set()
    await calls.started(2)
    assert calls.items[1] == ["b" * 10]
    for index in range(1, 5):
        calls.releases[index].set()
        await calls.started(min(index + 2, 5))
    assert await light_request == ["B" * 10] and await first == ["X" * 50]
    assert await asyncio.gather(*queued) == [[f"{n}".upper() * 50] for n in range(3)]


async def test_without_fair_share_a_light_key_waits_its_turn_and_is_refused():
    calls = Calls()
    merged = Coalescer(calls.work, share, max_rows=1, max_in_flight=1, pace=FixedPace(0.01), cost=units,
                       name="model 'm'", fair_share=False)
    flood, light = Tenant("a-hash", "a"), Tenant("b-hash", "b")
    first = as_key(flood, lambda: merged.submit(["x" * 50], 5))
    await calls.started(1)
    queued = [as_key(flood, lambda n=n: merged.submit([f"{n}" * 50], 5)) for n in range(3)]
    await asyncio.sleep(0)
    with pytest.raises(Overloaded):
        await as_key(light, lambda: merged.submit(["b" * 10], 1.0))
    for index in range(4):
        calls.releases[index].set()
        await calls.started(min(index + 2, 4))
    await first
    await asyncio.gather(*queued)
