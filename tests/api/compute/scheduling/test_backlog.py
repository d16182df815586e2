"""Admission by cost where Triton batches a model (``backlog.py``), on a clock the tests move."""

import pytest

from embedgate.api.compute.scheduling.backlog import Backlog, Backlogs
from embedgate.api.errors import Overloaded


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


def measured(clock: Clock, units: float = 10, seconds: float = 1.0, **options) -> Backlog:
    """A backlog whose rate was read from one request: ``units`` answered in ``seconds``."""
    backlog = Backlog("model 'm'", 0.8, clock=clock, **options)
    with backlog.admitted(units, 30):
        clock.now += seconds
    return backlog


def test_no_rate_before_an_answer_and_everything_admitted(clock):
    backlog = Backlog("model 'm'", 0.8, clock=clock)
    assert backlog.rate is None
    with backlog.admitted(10_000, 1), backlog.admitted(10_000, 1):
        assert (backlog.requests, backlog.cost) == (2, 20_000)
    assert (backlog.requests, backlog.cost) == (0, 0)


def test_the_rate_is_units_answered_per_busy_second(clock):
    backlog = measured(clock, units=10, seconds=2.0)
    assert backlog.rate == pytest.approx(5.0)
    clock.now += 60  # idle time is not busy time
    with backlog.admitted(4, 30):
        clock.now += 0.5
    assert backlog.rate == pytest.approx(14 / 2.5)


def test_overlapping_work_counts_its_busy_time_once(clock):
    backlog = Backlog("model 'm'", 0.8, clock=clock)
    with backlog.admitted(10, 30):
        clock.now += 1.0
        with backlog.admitted(10, 30):
            clock.now += 1.0
    assert backlog.rate == pytest.approx(10.0)  # 20 units in 2 busy seconds, not 3


def test_a_request_past_its_share_is_refused_with_when_to_retry(clock):
    backlog = measured(clock, units=10, seconds=1.0)  # 10 units/s
    with backlog.admitted(200, 30):  # 20 s of work admitted
        with pytest.raises(Overloaded) as refused:
            with backlog.admitted(50, 30):  # 25 s with it: past 80% of 30 s
                pass
        assert refused.value.retry_after_s == 1
        assert "model 'm' has about 25s of work admitted" in refused.value.message
        assert "80% of its 30s deadline" in refused.value.message
        assert (backlog.requests, backlog.cost) == (1, 200)  # nothing of the refused one stays
        with backlog.admitted(40, 30):  # 24 s: within
            pass


@pytest.mark.parametrize(("admitted", "retry"), [(500, 51 - 8), (10_000, 60)])
def test_the_retry_after_is_when_enough_has_drained(clock, admitted, retry):
    backlog = measured(clock, units=10, seconds=1.0)
    with backlog.admitted(admitted, 10), pytest.raises(Overloaded) as refused:
        with backlog.admitted(10, 10):
            pass
    assert refused.value.retry_after_s == retry  # (admitted + 10) / 10 s of work, 8 allowed; at most 60


def test_a_request_alone_is_never_refused(clock):
    backlog = measured(clock, units=10, seconds=1.0)
    with backlog.admitted(10_000, 1):
        assert backlog.requests == 1


def test_share_zero_admits_by_count_only(clock):
    backlog = Backlog("model 'm'", 0.0, clock=clock)
    with backlog.admitted(10, 30):
        clock.now += 1
    with backlog.admitted(10_000, 1), backlog.admitted(10_000, 1):
        pass


def test_failed_work_counts_its_time_and_no_units(clock):
    backlog = measured(clock, units=10, seconds=1.0)
    with pytest.raises(TimeoutError), backlog.admitted(10, 30):
        clock.now += 1.0
        raise TimeoutError
    assert backlog.rate == pytest.approx(5.0)
    assert (backlog.requests, backlog.cost) == (0, 0)


def test_the_rate_follows_the_newest_window_of_busy_time(clock):
    backlog = measured(clock, units=100, seconds=1.0, window_s=5.0)  # fast at first
    for _ in range(10):
        with backlog.admitted(10, 30):
            clock.now += 1.0
    assert backlog.rate == pytest.approx(10.0)  # only the last 5 busy seconds, all slow


class Model:
    def __init__(self, dynamic_batching: bool = True):
        self.name = "m"
        self.metadata = type("Meta", (), {"dynamic_batching": dynamic_batching})()


def test_each_triton_part_has_its_own_backlog_and_a_model_loaded_again_a_new_one():
    backlogs = Backlogs(0.8)
    model = Model()
    with backlogs.admitted(model, "m_image_encoder", float, 8, 30):
        assert backlogs["m_image_encoder"].cost == 8
        with backlogs.admitted(model, "m_text_encoder", float, 20, 30):
            assert backlogs["m_text_encoder"].cost == 20
    first = backlogs["m_image_encoder"]
    assert first.rate is not None
    with backlogs.admitted(Model(), "m_image_encoder", float, 8, 30):
        assert backlogs["m_image_encoder"] is not first and backlogs["m_image_encoder"].requests == 1


@pytest.mark.parametrize(("share", "dynamic_batching"), [(0.0, True), (0.8, False)])
def test_nothing_is_kept_without_a_share_or_where_the_gateway_batches(share, dynamic_batching):
    backlogs = Backlogs(share)
    def cost(work):
        pytest.fail("no cost is asked for")

    with backlogs.admitted(Model(dynamic_batching), "m_image_encoder", cost, ["an image"], 30):
        pass
    with pytest.raises(KeyError):
        backlogs["m_image_encoder"]


def test_the_gateways_own_work_is_not_admitted():
    backlogs = Backlogs(0.8)
    with backlogs.admitted(Model(), None, float, 8, 30):
        pass
    assert not backlogs._known


def test_small_work_is_not_read(clock):
    backlog = Backlog("model 'm'", 0.8, min_read=64, clock=clock)
    with backlog.admitted(10, 30):
        clock.now += 1.0
    assert backlog.rate is None
    with backlog.admitted(100, 30):
        clock.now += 0.5
    assert backlog.rate == pytest.approx(200.0)
