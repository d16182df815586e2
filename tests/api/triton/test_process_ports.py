"""A port picked free can be taken before tritonserver binds it (another process's outgoing
connection gets it from the same range): tritonserver says so and exits, and the first
start tries again on other free ports. A port the settings name is not changed."""

from __future__ import annotations

import asyncio
import sys

import pytest

from embedgate.api.settings import Settings
from embedgate.api.triton.command import PortTaken, Ports, taken_port
from embedgate.api.triton.process import PORT_TRIES, TritonProcess

# tritonserver's own line, as it printed it for a port another process held.
TAKEN = (
    "E1128 06:58:39.336930 11571 main.cc:257] \"failed to start HTTP service: Unavailable - "
    "Socket '127.0.0.1:40217' already in use \""
)


def test_the_taken_port_is_read_from_tritonservers_line():
    assert taken_port(TAKEN) == 40217
    assert taken_port('I1128 06:58:39.3 1 grpc_server.cc:2] "Started GRPCInferenceService at 127.0.0.1:40218"') is None


async def test_a_tritonserver_that_exits_on_a_taken_port_says_which(tmp_path):
    process = TritonProcess(Settings(), tmp_path)
    process.ports = Ports(40217, 40218, 40219)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", f"print({TAKEN!r}); raise SystemExit(1)",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    process.log_task = asyncio.create_task(process.forward_log(proc))
    with pytest.raises(PortTaken) as raised:
        await process.wait_ready(proc)
    assert raised.value.port == 40217
    assert "exited during startup (code 1)" in str(raised.value)


def starts(process: TritonProcess, taken: list[str]) -> list[Ports]:
    """``spawn`` replaced: each start's ports, failing on the port named in ``taken``'s
    next entry (``http``, ``grpc`` or ``metrics``) while there is one."""
    tried: list[Ports] = []

    async def spawn() -> None:
        ports = process.ports
        assert ports is not None
        tried.append(ports)
        if taken:
            raise PortTaken(getattr(ports, taken.pop(0)), 1)

    process.spawn = spawn  # type: ignore[method-assign]
    return tried


async def test_a_port_picked_free_and_taken_first_is_replaced_by_other_free_ones(tmp_path):
    process = TritonProcess(Settings(), tmp_path)
    process.ports = Ports(40217, 40218, 40219)
    tried = starts(process, ["http", "grpc"])
    await process.spawn_on_free_ports()
    assert len(tried) == 3
    assert tried[0] == Ports(40217, 40218, 40219)
    assert tried[1] != tried[0] and tried[2] != tried[1]
    assert process.ports == tried[2]


async def test_it_gives_up_after_a_few_starts(tmp_path):
    process = TritonProcess(Settings(), tmp_path)
    process.ports = Ports(40217, 40218, 40219)
    tried = starts(process, ["http"] * (PORT_TRIES + 1))
    with pytest.raises(PortTaken):
        await process.spawn_on_free_ports()
    assert len(tried) == PORT_TRIES


async def test_a_port_the_settings_name_is_not_changed(tmp_path):
    process = TritonProcess(Settings(triton_grpc_port=40218), tmp_path)
    process.ports = Ports(40217, 40218, 40219)
    tried = starts(process, ["grpc"])
    with pytest.raises(PortTaken) as raised:
        await process.spawn_on_free_ports()
    assert raised.value.port == 40218
    assert tried == [Ports(40217, 40218, 40219)]
