"""A Triton call sent again when what was to answer it died (fakes for Triton and the call)."""

from __future__ import annotations

import pytest

from embedgate.api.compute.resend import surviving
from embedgate.api.errors import ModelProcessLost, TritonConnectionLost


class FakeTriton:
    def __init__(self, comes_back: bool = True):
        self.restarts = 0
        self.comes_back = comes_back

    async def wait_restarted(self, since: int) -> bool:
        if not self.comes_back:
            return False
        self.restarts = since + 1
        return True


def calls(*outcomes):
    """A call that raises or returns each outcome in turn."""
    pending = list(outcomes)

    async def call():
        outcome = pending.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return call


async def test_a_triton_that_dies_while_the_lost_model_is_loaded_again_is_waited_for():
    """The model's process died; Triton itself died during the reload (seen under load):
    its restart reloads the model, and the request goes again."""
    reloads = []

    async def reload_lost(model, part, sent_at):
        reloads.append(part)
        raise TritonConnectionLost("the inference server is unavailable; retry shortly")

    call = calls(ModelProcessLost("lost", "m"), "answer")
    assert await surviving(call, "m", FakeTriton(), reload_lost) == "answer"
    assert reloads == ["m"]


async def test_without_a_restart_the_lost_connection_is_the_answer():
    async def reload_lost(model, part, sent_at):
        raise TritonConnectionLost("gone")

    with pytest.raises(TritonConnectionLost):
        await surviving(calls(ModelProcessLost("lost", "m")), "m", FakeTriton(comes_back=False), reload_lost)


async def test_a_model_whose_process_dies_twice_is_answered():
    async def reload_lost(model, part, sent_at):
        pass

    call = calls(ModelProcessLost("lost", "m"), ModelProcessLost("lost again", "m"))
    with pytest.raises(ModelProcessLost):
        await surviving(call, "m", FakeTriton(), reload_lost)
