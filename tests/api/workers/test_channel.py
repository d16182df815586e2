"""The line between the primary and its workers, over a real Unix socket: calls both
ways, notes, the gateway's errors arriving as themselves, and a closed line failing what
waits on it."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from embedgate.api.errors import EmbedgateError, ModelNotFound, PrimaryUnavailable, PromptError
from embedgate.api.workers.channel import Peer


@contextlib.asynccontextmanager
async def pair(tmp_path, server_handlers: dict, client_handlers: dict):
    ends: asyncio.Queue[Peer] = asyncio.Queue()

    async def connected(reader, writer):
        peer = Peer(reader, writer, server_handlers)
        ends.put_nowait(peer)
        await peer.run()

    path = str(tmp_path / "control.sock")
    server = await asyncio.start_unix_server(connected, path)
    client = await Peer.connect(path, client_handlers)
    reading = asyncio.create_task(client.run())
    primary = await ends.get()
    try:
        yield primary, client
    finally:
        await client.close()
        await primary.close()
        server.close()
        await asyncio.gather(reading, return_exceptions=True)


async def test_calls_both_ways_and_notes(tmp_path):
    noted = asyncio.Queue()

    async def add(a, b, *, times=1):
        return (a + b) * times

    async def note(value):
        noted.put_nowait(value)

    async def ask_back(primary_side: list):
        return await primary_side[0].call("echo", "from the primary")

    async def echo(text):
        return {"echo": text}

    primary_side: list[Peer] = []
    server = {"add": add, "ask_back": lambda: ask_back(primary_side)}
    async with pair(tmp_path, server, {"echo": echo, "note": note}) as (primary, client):
        primary_side.append(primary)
        assert await client.call("add", 2, 3, times=4) == 20
        # A call answered while the other side calls back over the same line.
        assert await client.call("ask_back") == {"echo": "from the primary"}
        primary.notify("note", b"bytes pass as they are")
        assert await asyncio.wait_for(noted.get(), 5) == b"bytes pass as they are"
        many = await asyncio.gather(*(client.call("add", i, 0) for i in range(50)))
        assert many == list(range(50))


async def test_the_gateways_errors_arrive_as_themselves_and_others_as_internal(tmp_path):
    async def not_found():
        raise ModelNotFound("model 'x' is not in the repository")

    async def bad_prompt():
        raise PromptError("unknown_prompt", "no prompt 'q'", "prompt_name")

    async def broken():
        raise ValueError("a secret detail")

    async with pair(tmp_path, {"a": not_found, "b": bad_prompt, "c": broken}, {}) as (_, client):
        with pytest.raises(ModelNotFound) as found:
            await client.call("a")
        assert found.value.code == "model_not_found" and found.value.message == "model 'x' is not in the repository"
        with pytest.raises(PromptError) as prompt:
            await client.call("b")
        assert (prompt.value.code, prompt.value.param, prompt.value.message) == (
            "unknown_prompt", "prompt_name", "no prompt 'q'"
        )
        with pytest.raises(EmbedgateError) as internal:
            await client.call("c")
        assert internal.value.code == "internal_error" and "secret" not in internal.value.message


async def test_a_closed_line_fails_the_calls_waiting_on_it_and_later_ones(tmp_path):
    started = asyncio.Event()

    async def forever():
        started.set()
        await asyncio.Event().wait()

    async with pair(tmp_path, {"forever": forever}, {}) as (primary, client):
        waiting = asyncio.create_task(client.call("forever"))
        await started.wait()
        await primary.close()
        with pytest.raises(PrimaryUnavailable):
            await asyncio.wait_for(waiting, 5)
        await asyncio.wait_for(client.closed.wait(), 5)
        with pytest.raises(PrimaryUnavailable):
            await client.call("forever")
