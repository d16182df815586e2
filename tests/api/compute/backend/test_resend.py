"""A Triton call sent again when what was to answer it died (fakes for Triton and the call)."""

from __future__ import annotations

import asyncio

import pytest

from embedgate.api.compute.backend.resend import surviving, unloaded
from embedgate.api.errors import ModelProcessLost, TritonConnectionLost, TritonUnavailable


class FakeTriton:
    def __init__(self, comes_back: bool = True, serving: bool = True):
        self.restarts = 0
        self.comes_back = comes_back
        self.serving = serving

    async def wait_restarted(self, since: int) -> bool:
        if not self.comes_back:
            return False
        self.restarts = since + 1
        return True

    async def wait_serving(self) -> bool:
        while not self.serving:
            await asyncio.sleep(0.01)
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


async def test_a_request_that_reaches_triton_before_its_models_are_back_is_sent_again_once_they_are():
    """Triton restarted (it runs, answering), its models not loaded yet: the request waits
    for them, not a 503."""
    triton = FakeTriton(serving=False)
    sent = []

    async def call():
        sent.append(triton.serving)
        if not triton.serving:
            asyncio.get_running_loop().call_later(0.1, setattr, triton, "serving", True)
            raise TritonUnavailable("model 'm' is not available in the inference server right now")
        return "answer"

    assert await surviving(call, "m", triton, None) == "answer"
    assert sent == [False, True]


async def test_a_request_that_reaches_a_triton_being_stopped_is_answered():
    class Stopping(FakeTriton):
        async def wait_serving(self):
            return False

    with pytest.raises(TritonUnavailable):
        await surviving(calls(TritonUnavailable("not available"), "answer"), "m", Stopping(serving=False), None)


async def test_a_model_a_serving_triton_does_not_have_is_the_answer():
    call = calls(TritonUnavailable("model 'm' is not available"), "answer")
    with pytest.raises(TritonUnavailable):
        await surviving(call, "m", FakeTriton(), None)
    with pytest.raises(TritonUnavailable):
        await surviving(calls(TritonUnavailable("not available")), "m", None, None)


async def test_a_request_a_restart_overtook_is_sent_again_once_the_models_are_back():
    """Sent to the Triton that then died; answered 'unavailable' by its successor after
    the supervisor counted the restart."""
    triton = FakeTriton()

    async def call():
        if triton.restarts == 0:
            triton.restarts = 1
            raise TritonUnavailable("model 'm' is not available")
        return "answer"

    assert await surviving(call, "m", triton, None) == "answer"


async def test_a_model_unloaded_while_triton_restarts_is_unloaded_from_the_triton_that_comes_back():
    unloads = []

    async def unload(part):
        unloads.append(part)
        if len(unloads) == 1:
            raise TritonConnectionLost("the inference server is unavailable; retry shortly")

    await unloaded(unload, ["m_text", "m_image"], FakeTriton(), timeout_s=5)
    assert unloads == ["m_text", "m_text", "m_image"]


async def test_an_unload_whose_triton_does_not_come_back_in_time_is_a_lost_connection():
    class NeverBack(FakeTriton):
        async def wait_restarted(self, since):
            await asyncio.sleep(60)
            return True

    async def unload(part):
        raise TritonConnectionLost("gone")

    with pytest.raises(TritonConnectionLost, match="did not come back"):
        await unloaded(unload, ["m"], NeverBack(), timeout_s=0.1)
