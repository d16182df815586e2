"""TEI's ``*Stream`` methods' answering: in order, at most a window in flight, a slow reader
slowing the reading of requests, the first failure ending the stream, a closed stream
cancelling what it had in flight."""

from __future__ import annotations

import asyncio
from contextlib import aclosing

import pytest

from embedgate.api.grpc.streams import answered_in_order


class Requests:
    """A request stream that counts what was read of it."""

    def __init__(self, items):
        self.items = list(items)
        self.read = 0

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self.read == len(self.items):
            raise StopAsyncIteration
        self.read += 1
        return self.items[self.read - 1]


class Answers:
    """Answers that finish in the order the test releases them, counting those in flight."""

    def __init__(self):
        self.released: dict[int, asyncio.Event] = {}
        self.in_flight = 0
        self.most = 0
        self.cancelled: list[int] = []

    def release(self, item: int) -> None:
        self.released.setdefault(item, asyncio.Event()).set()

    async def __call__(self, item: int) -> str:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await self.released.setdefault(item, asyncio.Event()).wait()
            if item < 0:
                raise ValueError(f"request {item} is refused")
            return f"answer {item}"
        except asyncio.CancelledError:
            self.cancelled.append(item)
            raise
        finally:
            self.in_flight -= 1


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_answers_come_in_the_requests_order_whatever_order_they_finish_in():
    answers = Answers()
    for item in (4, 2, 3, 0, 1):
        answers.release(item)
    got = [a async for a in answered_in_order(Requests(range(5)), answers, window=8)]
    assert got == [f"answer {item}" for item in range(5)]


async def test_at_most_a_window_in_flight_and_no_request_read_past_it():
    answers, requests = Answers(), Requests(range(20))
    async with aclosing(answered_in_order(requests, answers, window=3)) as stream:
        first = asyncio.ensure_future(stream.__anext__())
        await settle()
        assert answers.in_flight == 3 and requests.read <= 4  # one read, waiting for room
        answers.release(0)
        assert await first == "answer 0"
        await settle()
        assert answers.in_flight == 3
        for item in range(1, 20):
            answers.release(item)
        rest = [answer async for answer in stream]
    assert len(rest) == 19 and answers.most == 3


async def test_a_slow_reader_holds_the_stream_back():
    answers, requests = Answers(), Requests(range(100))
    for item in range(100):
        answers.release(item)
    async with aclosing(answered_in_order(requests, answers, window=4)) as stream:
        assert await stream.__anext__() == "answer 0"
        await settle()  # the reader takes no more answers for a while
        # Answered and waiting to be read, or in flight: never more than the window.
        assert requests.read <= 1 + 4 + 1


async def test_the_first_failure_ends_the_stream_after_the_answers_before_it():
    answers = Answers()
    for item in (0, -1, 2):
        answers.release(item)
    got = []
    with pytest.raises(ValueError, match="request -1"):
        async for answer in answered_in_order(Requests([0, -1, 2, 3]), answers, window=4):
            got.append(answer)
    assert got == ["answer 0"]
    await settle()
    assert 3 in answers.cancelled and answers.in_flight == 0


async def test_a_broken_request_stream_ends_the_stream():
    class Broken(Requests):
        async def __anext__(self):
            if self.read == 1:
                raise ConnectionError("the client's stream broke")
            return await super().__anext__()

    answers = Answers()
    answers.release(0)
    with pytest.raises(ConnectionError):
        async for _ in answered_in_order(Broken([0, 1, 2]), answers, window=4):
            pass


async def test_closing_the_stream_cancels_its_requests_in_flight():
    answers, requests = Answers(), Requests(range(10))
    stream = answered_in_order(requests, answers, window=4)
    waiting = asyncio.ensure_future(stream.__anext__())
    await settle()
    assert answers.in_flight == 4
    waiting.cancel()  # the method's task cancelled: the client went away
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await stream.aclose()
    await settle()
    assert answers.in_flight == 0 and sorted(answers.cancelled) == [0, 1, 2, 3]
    assert requests.read <= 5
