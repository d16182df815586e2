"""``EMBEDGATE_GRPC_PORT`` asks for TEI's gRPC API: refused at once, saying what to install,
where what serving it imports is missing; never checked where it is off."""

from __future__ import annotations

import importlib.util

import pytest
from pydantic import ValidationError

from embedgate.api.settings import Settings


@pytest.mark.parametrize(("missing", "said"), [
    ("grpc_health", "pip install 'embedgate[grpc]'"),
    ("embedgate.api.grpc.stubs.tei_pb2", "generated when the package is built"),
])
def test_a_grpc_port_without_what_it_needs_is_refused(monkeypatch, missing, said):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == missing else find_spec(name, *a))
    with pytest.raises(ValidationError, match=said.replace("[", r"\[").replace("]", r"\]")):
        Settings(grpc_port=50051)
    assert Settings(grpc_port=0).grpc_port == 0


def test_the_grpc_port_is_off_by_default():
    assert Settings().grpc_port == 0
