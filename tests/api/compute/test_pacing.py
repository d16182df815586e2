"""A model's measured rate: from calls that found an instance free, and from what it
finishes while requests queue; and the cost estimate both sides count in."""

import pytest

from embedgate.api.compute.pacing import WINDOW_S, Pace, items_cost, text_cost


def test_a_text_costs_its_estimated_tokens():
    assert text_cost("abcd" * 10) == 10 + 2
    assert text_cost(("abcd" * 3, "abcd" * 2)) == 5 + 3  # a pair has one more separator
    assert items_cost(["abcd", "abcd" * 2]) == (1 + 2) + (2 + 2)


def test_no_rate_until_a_call_finishes():
    pace = Pace(instances=2)
    assert pace.rate is None and pace.seconds_for(100) is None


def test_a_call_on_a_free_instance_reads_the_rate_of_all_instances():
    pace = Pace(instances=2)
    pace.call_finished(100, 5.0, now=5.0, started_free=True, saturated=False)
    assert pace.rate is None  # the first call pays for the first run: not read
    pace.call_finished(100, 0.5, now=10.0, started_free=True, saturated=False)
    assert pace.rate == 400  # two instances, each 100 units in 0.5 s
    assert pace.seconds_for(800) == 2.0
    pace.call_finished(100, 1.0, now=11.0, started_free=True, saturated=False)
    assert pace.rate == pytest.approx(0.7 * 400 + 0.3 * 200)


def test_while_requests_queue_the_rate_is_what_the_model_finishes_over_a_window():
    pace = Pace(instances=2)
    # Queued calls: their durations include the wait, so they alone read nothing.
    pace.call_finished(50, 3.0, now=0.0, started_free=False, saturated=True)
    assert pace.rate is None
    pace.call_finished(50, 3.0, now=1.0, started_free=False, saturated=True)
    assert pace.rate is None  # the window is shorter than WINDOW_S
    pace.call_finished(50, 3.0, now=WINDOW_S, started_free=False, saturated=True)
    assert pace.rate == pytest.approx(100 / WINDOW_S)


def test_a_lull_ends_the_window():
    pace = Pace(instances=1)
    pace.call_finished(50, 1.0, now=0.0, started_free=False, saturated=True)
    pace.call_finished(50, 1.0, now=1.0, started_free=False, saturated=False)  # nothing waited
    pace.call_finished(50, 1.0, now=5.0, started_free=False, saturated=True)  # a new window starts
    assert pace.rate is None
    pace.call_finished(50, 1.0, now=5.0 + WINDOW_S, started_free=False, saturated=True)
    assert pace.rate == pytest.approx(50 / WINDOW_S)
