"""Per-key limits: a bucket per limit holding a minute's allowance, refilled at the limit's
rate; a request the buckets cannot cover is refused with the seconds until they can; a
request larger than a minute's tokens passes on a full bucket and leaves it in debt."""

import pytest

from embedgate.api.compute.scheduling.rates import KeyRates
from embedgate.api.compute.scheduling.tenants import Tenant
from embedgate.api.errors import RateLimited

A, B = Tenant("a-hash", "a"), Tenant("b-hash", "b")


class Clock:
    now = 100.0

    def __call__(self):
        return self.now


def test_a_minutes_requests_then_one_a_second_for_60_per_minute():
    clock = Clock()
    rates = KeyRates(60, 0, clock)
    for _ in range(60):
        rates.take(A, 5)
    with pytest.raises(RateLimited) as refused:
        rates.take(A, 5)
    assert refused.value.retry_after_s == 1 and "60 requests per minute" in refused.value.message
    standing = refused.value.standing
    assert standing.requests.remaining == 0 and standing.requests.limit == 60 and standing.tokens is None
    rates.take(B, 5)  # another key has buckets of its own
    clock.now += 1.0
    after = rates.take(A, 5)
    assert after.requests.remaining == 0 and after.requests.reset_s == pytest.approx(60.0)


def test_tokens_are_refused_with_the_seconds_until_they_are_there():
    clock = Clock()
    rates = KeyRates(0, 600, clock)  # 10 tokens a second
    assert rates.take(A, 550).tokens.remaining == 50
    with pytest.raises(RateLimited) as refused:
        rates.take(A, 100)
    assert refused.value.retry_after_s == 5  # 50 more tokens at 10 a second
    clock.now += 5
    assert rates.take(A, 100).tokens.remaining == 0


def test_a_request_larger_than_a_minute_passes_on_a_full_bucket_and_leaves_a_debt():
    clock = Clock()
    rates = KeyRates(0, 600, clock)
    rates.take(A, 1800)  # three minutes' tokens
    with pytest.raises(RateLimited) as refused:
        rates.take(A, 1)
    assert refused.value.retry_after_s == 121  # the debt of 1200, and the one token, at 10 a second
    clock.now += 180
    assert rates.take(A, 1800).tokens.remaining == 0


def test_no_limits_or_no_key_take_nothing():
    assert KeyRates(0, 0).take(A, 10) is None
    assert KeyRates(1, 1).take(None, 10) is None


def test_both_limits_are_charged_and_the_longer_wait_counts():
    clock = Clock()
    rates = KeyRates(120, 60, clock)  # 2 requests and 1 token a second
    rates.take(A, 60)
    with pytest.raises(RateLimited) as refused:
        rates.take(A, 3)
    assert refused.value.retry_after_s == 3 and refused.value.standing.requests.remaining == 119
