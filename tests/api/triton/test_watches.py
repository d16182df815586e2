"""The supervisor's watches, each over fakes of the narrow interface it is given: the
watchdog restarts a tritonserver that exited (again after a failed start) and has the
listeners load its models before it serves; the stub watch tells each model that lost a
stub while its tritonserver runs on."""

from __future__ import annotations

import asyncio

from embedgate.api.settings import Settings
from embedgate.api.triton import watches
from embedgate.api.triton.watches import StubWatch, Watchdog
from tests.helpers import eventually


class FakeProcess:
    """A tritonserver that exits when the test says so, and whose starts fail ``failing``
    times (a start that failed leaves a process that has exited)."""

    def __init__(self, failing: int = 0):
        self.failing = failing
        self.alive = True
        self.exit = asyncio.Event()
        self.calls: list[str] = []

    async def exited(self) -> int:
        if self.alive:
            await self.exit.wait()
            self.alive = False
        return 134

    async def terminate(self, graceful: bool) -> None:
        self.calls.append("terminate")

    async def spawn(self) -> None:
        self.calls.append("spawn")
        if self.failing:
            self.failing -= 1
            raise RuntimeError("tritonserver exited during startup (code 1)")
        self.alive = True
        self.exit.clear()


async def test_a_tritonserver_that_exits_is_started_again_and_serves_once_its_models_are_back():
    process = FakeProcess(failing=1)
    watchdog = Watchdog(process, Settings(triton_restart_backoff_s=0), lambda: False)
    watchdog.serving.set()
    reloaded = asyncio.Event()
    seen_serving = []

    async def reload() -> None:
        seen_serving.append(watchdog.serving.is_set())
        reloaded.set()

    watchdog.listeners.append(reload)
    running = asyncio.create_task(watchdog.run())
    try:
        process.exit.set()
        await asyncio.wait_for(reloaded.wait(), 30)
        await asyncio.wait_for(watchdog.serving.wait(), 30)
        # The failed start is tried again (it counts no restart); the listeners run before it serves.
        assert process.calls == ["terminate", "spawn", "terminate", "spawn"]
        assert watchdog.restarts == 1 and seen_serving == [False]
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


async def test_a_tritonserver_stopped_on_purpose_is_not_restarted():
    process = FakeProcess()
    stopping = []
    watchdog = Watchdog(process, Settings(), lambda: bool(stopping))
    running = asyncio.create_task(watchdog.run())
    stopping.append(True)
    process.exit.set()
    await asyncio.wait_for(running, 30)
    assert process.calls == [] and watchdog.restarts == 0


async def test_a_stub_lost_while_tritonserver_serves_is_told_by_its_model(monkeypatch):
    monkeypatch.setattr(watches, "STUB_POLL_S", 0.01)
    stubs = {("org--m", "org--m_0_0"), ("org--m", "org--m_0_1"), ("other", "other_0_0")}
    looks = []

    def running(pid: int) -> set[tuple[str, str]]:
        looks.append(pid)
        return set(stubs)

    monkeypatch.setattr(watches.instances, "running", running)
    serving, checks = [True], []

    def is_serving() -> bool:
        checks.append(serving[0])
        return serving[0]

    watch = StubWatch(lambda: 1234, is_serving)
    told: list[str] = []

    async def lost(part: str) -> None:
        told.append(part)

    watch.listeners.append(lost)
    task = asyncio.create_task(watch.run())
    try:
        await eventually(lambda: len(looks) >= 2)  # seen with all its stubs
        stubs.discard(("org--m", "org--m_0_1"))
        await eventually(lambda: told == ["org--m"])
        # While Triton is brought back its stubs come and go: none of that is a loss.
        serving[0] = False
        stubs.clear()
        await eventually(lambda: checks[-3:] == [False] * 3)
        stubs.add(("org--m", "org--m_0_0"))
        serving[0] = True
        seen = len(looks)
        await eventually(lambda: len(looks) >= seen + 3)
        assert told == ["org--m"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
