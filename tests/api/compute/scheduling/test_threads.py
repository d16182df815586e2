"""Blocking work off the event loop: results and exceptions reach the caller, work whose
caller stopped waiting runs and is dropped, and calls not started when the threads stop are
cancelled."""

import asyncio
import threading

import pytest

from embedgate.api.compute.scheduling.threads import OffLoopThreads


async def test_results_and_exceptions_come_back_from_another_thread():
    threads = OffLoopThreads(2, "test")
    try:
        names = await asyncio.gather(*(threads.run(lambda: threading.current_thread().name) for _ in range(8)))
        assert set(names) <= {"test_0", "test_1"} and threading.current_thread().name not in names
        assert await threads.run(sum, [1, 2, 3]) == 6
        with pytest.raises(ZeroDivisionError):
            await threads.run(lambda: 1 / 0)
    finally:
        threads.shutdown()


async def test_work_whose_caller_left_still_runs_and_its_answer_is_dropped():
    threads = OffLoopThreads(1, "test")
    started, release, ran = threading.Event(), threading.Event(), threading.Event()

    def held():
        started.set()
        release.wait(10)
        ran.set()
        return "late"

    try:
        call = asyncio.ensure_future(threads.run(held))
        await asyncio.to_thread(started.wait, 10)
        call.cancel()
        release.set()
        await asyncio.to_thread(ran.wait, 10)
        assert ran.is_set() and call.cancelled()
        assert await threads.run(lambda: "next") == "next"  # the thread serves on
    finally:
        threads.shutdown()


async def test_calls_not_started_when_the_threads_stop_are_cancelled():
    threads = OffLoopThreads(1, "test")
    started, release = threading.Event(), threading.Event()

    def held():
        started.set()
        return release.wait(10)

    first = threads.run(held)
    await asyncio.to_thread(started.wait, 10)
    waiting = threads.run(lambda: "never")
    threads.shutdown()
    release.set()
    assert await first is True
    with pytest.raises(asyncio.CancelledError):
        await waiting
    with pytest.raises(asyncio.CancelledError):
        await threads.run(lambda: "after")
