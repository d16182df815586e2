"""Finding the server's processes in /proc, and what they use."""

import os
import socket
import subprocess
import sys
import time

from embedgate.bench.processes import MemoryWatch, ProcessSample, cpu_by_role, listening_pids, process_tree, sample


def test_the_process_listening_on_a_port_is_found():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert listening_pids(port) == [os.getpid()]
    with socket.socket() as bound_only:
        bound_only.bind(("127.0.0.1", 0))  # bound but not listening: not a server
        assert listening_pids(bound_only.getsockname()[1]) == []


def test_a_descriptor_closed_while_listed_does_not_hide_the_listener(monkeypatch):
    """A process's descriptors change while they are read (this one's own, as it lists
    them): one gone between the listing and its read is skipped, not the process."""
    readlink = os.readlink

    def closed_meanwhile(path, *args, **kwargs):
        if str(path).endswith("/fd/0"):
            raise FileNotFoundError(path)
        return readlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "readlink", closed_meanwhile)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        assert listening_pids(listener.getsockname()[1]) == [os.getpid()]


def test_the_tree_holds_descendants_with_their_memory_and_cpu():
    child = subprocess.Popen([sys.executable, "-c", "import time; sum(range(10**7)); time.sleep(30)"])
    try:
        deadline = time.monotonic() + 10
        while child.pid not in process_tree([os.getpid()]) and time.monotonic() < deadline:
            time.sleep(0.05)
        samples = {s.pid: s for s in sample([os.getpid()])}
        assert {os.getpid(), child.pid} <= set(samples)
        mine = samples[os.getpid()]
        assert mine.memory_kb > 1000 and mine.cpu_s > 0 and mine.role == "gateway"
        assert mine.memory_kind in ("pss", "rss")
    finally:
        child.kill()
        child.wait()


def _s(pid, name, memory_kb, cpu_s):
    return ProcessSample(pid, name, memory_kb, cpu_s, "pss")


def test_roles_follow_process_names_and_cpu_is_a_difference():
    before = [_s(1, "python", 100, 1.0), _s(2, "tritonserver", 200, 5.0)]
    after = [_s(1, "python", 100, 1.5), _s(2, "tritonserver", 200, 7.0), _s(3, "triton_python_b", 50, 0.25)]
    assert cpu_by_role(before, after) == {"gateway": 0.5, "triton": 2.25}


def test_memory_watch_keeps_peaks_of_the_tree_and_of_each_role():
    watch = MemoryWatch([1])
    watch.observe([_s(1, "python", 100, 0), _s(2, "tritonserver", 300, 0)])
    watch.observe([_s(1, "python", 150, 0), _s(2, "tritonserver", 200, 0)])
    assert watch.peak_kb == 400
    assert watch.peak_by_role_kb == {"gateway": 150, "triton": 300}
    assert watch.pids == {1, 2} and watch.memory_kind == "pss"
    watch.observe([ProcessSample(1, "python", 10, 0, "rss")])
    assert watch.memory_kind == "rss"


def test_gateway_workers_are_found_through_their_primary_and_counted_one_by_one():
    from embedgate.bench.processes import cpu_by_process, server_roots

    # A stand-in worker: listens on a port, and its command line names the worker module.
    listen = (
        "import socket, sys, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen();"
        " print(s.getsockname()[1], flush=True); sum(range(10**6)); time.sleep(30)"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", listen, "embedgate.api.workers.worker", "--index", "3"], stdout=subprocess.PIPE, text=True
    )
    try:
        port = int(child.stdout.readline())
        # The server is this process (its primary), with the worker among its descendants.
        assert server_roots(port) == [os.getpid()]
        samples = {s.pid: s for s in sample([os.getpid()])}
        assert samples[child.pid].label == "gateway worker 3" and samples[os.getpid()].label == "gateway"
        used = cpu_by_process([], list(samples.values()))
        assert used["gateway worker 3"] == samples[child.pid].cpu_s
    finally:
        child.kill()
        child.wait()
