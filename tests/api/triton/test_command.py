"""Triton's ports: free ones, never the gateway's own (Triton starts before the gateway
binds it, so the kernel may offer that port as free)."""

from __future__ import annotations

from embedgate.api.settings import Settings
from embedgate.api.triton import command


class _Offered:
    """A socket whose bind to port 0 gets the next of ``ports``."""

    def __init__(self, ports):
        self.ports = iter(ports)

    def __call__(self, *args):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def bind(self, address):
        self.port = next(self.ports)

    def getsockname(self):
        return ("127.0.0.1", self.port)


def test_the_gateways_port_and_ports_already_chosen_are_skipped(monkeypatch):
    monkeypatch.setattr(command.socket, "socket", _Offered([8686, 5000, 5000, 8686, 5001, 5002]))

    ports = command.choose_ports(Settings(port=8686))

    assert ports == command.Ports(http=5000, grpc=5001, metrics=5002)


def test_ports_that_are_set_are_kept_and_not_offered_again(monkeypatch):
    monkeypatch.setattr(command.socket, "socket", _Offered([7001, 6000]))

    ports = command.choose_ports(Settings(port=8686, triton_http_port=7001, triton_grpc_port=7002))

    assert ports == command.Ports(http=7001, grpc=7002, metrics=6000)


def test_real_free_ports_differ_from_each_other_and_the_gateways():
    ports = command.choose_ports(Settings(port=8686))
    assert len({ports.http, ports.grpc, ports.metrics, 8686}) == 4
