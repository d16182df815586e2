"""A model's measured speed (each call's time on its instance over its cost), and the
forecast of when calls sent from now on finish."""

from embedgate.api.compute.requests.costs import MIN_READ_COST
from embedgate.api.compute.scheduling.pacing import RECENT_CALLS, SKIPPED_CALLS, Pace, Schedule


def test_no_speed_until_a_call_is_read():
    pace = Pace(instances=2)
    assert pace.unit_s is None and pace.rate is None and pace.schedule(0.0, []) is None


def test_the_speed_is_the_slowest_of_the_last_calls_time_on_its_instance_over_its_cost():
    pace = Pace(instances=2)
    for _ in range(SKIPPED_CALLS):
        pace.call_served(100, 5.0)  # the first run: not read
    assert pace.unit_s is None
    pace.call_served(100, 0.5)
    assert pace.unit_s == 0.005 and pace.rate == 400  # two instances, each 100 units in 0.5 s
    pace.call_served(200, 2.0)
    assert pace.unit_s == 0.01  # the slower reading counts
    pace.call_served(0, 1.0)  # nothing to read from
    pace.call_served(100, 0.0)
    assert pace.unit_s == 0.01
    for _ in range(RECENT_CALLS):
        pace.call_served(100, 0.2)
    assert pace.unit_s == 0.002  # the slow call is no longer among the last ones


def test_small_calls_are_not_read():
    # A lone sentence's call is mostly a call's fixed cost (and event-loop lag): read per
    # unit it would forecast a burst of merged calls many times too slow.
    pace = Pace(instances=2)
    for _ in range(SKIPPED_CALLS):
        pace.call_served(100, 5.0)
    pace.call_served(12, 0.5)
    assert pace.unit_s is None
    pace.call_served(400, 2.0)
    pace.call_served(MIN_READ_COST - 1, 5.0)
    assert pace.unit_s == 0.005


def test_calls_sent_to_idle_instances_finish_after_their_own_work():
    schedule = Schedule(now=10.0, instances=2, unit_s=0.01, running=[])
    assert schedule.finish(100) == 11.0
    assert schedule.add(100) == 11.0 and schedule.add(50) == 10.5
    assert schedule.add(100) == 11.5  # the third goes to the instance that freed first


def test_a_running_call_holds_its_instance_until_its_forecast_end():
    # Started at 9.5 with 1 s of work: free at 10.5. One overdue is taken to end now.
    schedule = Schedule(now=10.0, instances=2, unit_s=0.01, running=[(9.5, 100), (8.0, 100)])
    assert schedule.add(100) == 11.0  # on the overdue one's instance, from now
    assert schedule.add(100) == 11.5


def test_a_call_waiting_in_tritons_queue_goes_before_the_calls_to_come():
    schedule = Schedule(now=0.0, instances=1, unit_s=0.01, running=[(0.0, 100), (None, 300)])
    assert schedule.finish(100) == 1.0 + 3.0 + 1.0


def test_the_last_call_of_a_queue_runs_on_one_instance():
    # Three equal calls on two instances: the work is 1.5 calls per instance, but the last
    # one starts only when the first frees, and ends after two calls' time.
    schedule = Schedule(now=0.0, instances=2, unit_s=1.0, running=[])
    assert [schedule.add(1) for _ in range(3)] == [1, 1, 2]
