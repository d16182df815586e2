"""The in-flight limit, shared fairly between keys: a key alone may use all of it; at the
limit, a key under its share is still admitted and the keys at or over theirs are refused;
anonymous requests (no keys) are admitted by the limit alone."""

import contextlib
import contextvars

import pytest

from embedgate.api.compute.scheduling.admission import admit
from embedgate.api.compute.scheduling.tenants import Tenant, serve_as
from embedgate.api.errors import Overloaded

A, B, C = (Tenant(owner=f"{name}-hash", label=name) for name in "abc")


class Model:
    name = "m"

    def __init__(self):
        self.inflight = 0
        self.by_key = {}


class Requests:
    """Requests held in flight, each admitted in a context of its own (as each request's
    task is), and ended at will."""

    def __init__(self, model, limit, fair_share=True):
        self.model, self.limit, self.fair_share = model, limit, fair_share
        self.held = {}

    def send(self, tenant, count=1):
        for _ in range(count):
            context = contextvars.copy_context()
            stack = context.run(self._enter, tenant)
            self.held.setdefault(tenant, []).append((context, stack))

    def _enter(self, tenant):
        serve_as(tenant)
        stack = contextlib.ExitStack()
        stack.enter_context(admit(self.model, self.limit, self.fair_share))
        return stack

    def end(self, tenant, count=1):
        for _ in range(count):
            context, stack = self.held[tenant].pop()
            context.run(stack.close)


def test_anonymous_requests_meet_the_limit_alone():
    model = Model()
    requests = Requests(model, 2)
    requests.send(None, 2)
    with pytest.raises(Overloaded, match="2 requests in flight"):
        requests.send(None)
    requests.end(None)
    requests.send(None)
    assert model.inflight == 2 and model.by_key == {}


def test_a_key_alone_uses_the_whole_limit_and_a_light_key_still_gets_in():
    model = Model()
    requests = Requests(model, 4)
    requests.send(A, 4)
    with pytest.raises(Overloaded, match="its share or more"):
        requests.send(A)
    requests.send(B)  # under its share (4 over 2 keys): admitted past the limit
    assert model.inflight == 5 and model.by_key == {A.owner: 4, B.owner: 1}
    requests.end(A)  # A drains; at the limit still, A stays refused while it holds its share
    with pytest.raises(Overloaded):
        requests.send(A)
    requests.send(B)
    with pytest.raises(Overloaded):  # B now holds its share: 2 of 4 over 2 keys
        requests.send(B)
    requests.send(C)  # a third key: 4 over 3 keys, it holds none
    assert model.by_key == {A.owner: 3, B.owner: 2, C.owner: 1}


def test_below_the_limit_every_key_is_admitted():
    model = Model()
    requests = Requests(model, 4)
    requests.send(A, 3)
    requests.send(B)  # the limit is not reached: nobody is refused
    requests.end(B)
    requests.send(A)
    assert model.inflight == 4 and model.by_key == {A.owner: 4}


def test_keys_leave_the_count_when_their_requests_end():
    model = Model()
    requests = Requests(model, 2)
    requests.send(A)
    requests.send(B)
    requests.end(A)
    requests.end(B)
    assert model.inflight == 0 and model.by_key == {}


def test_without_fair_share_keys_meet_the_limit_as_anonymous_requests_do():
    model = Model()
    requests = Requests(model, 2, fair_share=False)
    requests.send(A, 2)
    with pytest.raises(Overloaded, match="limit 2"):
        requests.send(B)


def test_keys_coming_one_after_another_never_take_the_model_past_twice_its_limit():
    # Each new key's share is the limit over the keys then in flight: A holds 12, B 6, C 4,
    # D 3 and every later key at least one, so without a ceiling the keys add up past twice
    # the limit (12 + 6 + 4 + 3 = 25 > 24, and one more for every further key).
    model = Model()
    requests = Requests(model, 12)
    keys = [Tenant(owner=f"key-{n}", label=f"key-{n}") for n in range(30)]
    refused = []
    for tenant in keys:
        while True:
            try:
                requests.send(tenant)
            except Overloaded as error:
                refused.append(error)
                break
    assert model.inflight == 24
    assert "twice its limit of 12" in refused[-1].message
    assert model.by_key[keys[0].owner] == 12 and model.by_key[keys[1].owner] == 6  # the shares held so far
    requests.end(keys[0], 2)  # below twice the limit: a key under its share is admitted again
    requests.send(keys[-1])
    assert model.inflight == 23
