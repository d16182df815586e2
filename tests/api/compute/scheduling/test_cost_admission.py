"""Coalescer's admission by cost (``cost_admission.py``): a request whose call would finish
past its share of the deadline is refused at once, or while it waits; with keys, a light
key's request goes ahead of a flood and the flood's are the ones refused."""

import asyncio

import pytest

from embedgate.api.compute.scheduling.coalescing import Coalescer
from embedgate.api.compute.scheduling.cost_admission import CostAdmission
from embedgate.api.compute.scheduling.pacing import Pace
from embedgate.api.compute.scheduling.tenants import Tenant
from embedgate.api.errors import Overloaded
from tests.api.compute.scheduling.test_coalescing import Calls, as_key, coalescer


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
    admission = CostAdmission(FixedPace(unit_s, instances), units, deadline_share=deadline_share, name="model 'm'")
    return Coalescer(calls, max_rows=max_rows, max_in_flight=instances, admission=admission)


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
    merged = Coalescer(calls, max_rows=1, max_in_flight=2, admission=CostAdmission(pace, units))
    first = asyncio.create_task(merged.submit(["x" * 10], 30))
    second = asyncio.create_task(merged.submit(["y" * 20], 30))
    await calls.started(2)  # both sent: the second waits in Triton's queue
    assert [call.started is not None for call in merged.admission.running] == [True, False]
    await asyncio.sleep(0.05)  # the second call has waited this long
    loop = asyncio.get_running_loop()
    freed = loop.time()
    calls.releases[0].set()
    await first
    assert merged.admission.running[0].started is not None and merged.admission.running[0].started >= freed
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
    merged.admission.pace.unit_s = 0.1  # the model turned out slower: their call now takes 3 s, past 1 s
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
        calls, max_rows=100, max_in_flight=1, admission=CostAdmission(Pace(1), units, name="model 'm'")
    )
    for lone in range(3):  # the first is never read; the others are lone sentences
        task = asyncio.create_task(merged.submit(["s" * 12], 30))
        await calls.started(lone + 1)
        await asyncio.sleep(0.1)
        calls.releases[lone].set()
        await task
    assert merged.admission.pace.unit_s is None
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
    assert merged.admission.pace.unit_s == pytest.approx(0.0, abs=0.01)  # and that call, of 480 units, was read


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
    admission = CostAdmission(FixedPace(0.01), units, name="model 'm'")
    merged = Coalescer(calls, max_rows=1, max_in_flight=1, admission=admission, fair_share=False)
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
