"""The interface is TEI's: the descriptor of ``api/grpc/proto/tei.proto`` is the one TEI's
published clients were generated from (tei-client's, from TEI's own file), byte for byte,
so field numbers, types, names and methods all agree; and the server implements every
method of it."""

from __future__ import annotations

import inspect

from google.protobuf import descriptor_pb2

from embedgate.api.grpc.services import SERVICE_NAMES, TeiServices
from embedgate.api.grpc.stubs import tei_pb2 as ours
from embedgate.api.grpc.stubs import tei_pb2_grpc


def described(module) -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(proto)
    return proto


def test_the_descriptor_is_teis():
    from tei_client.stubs import tei_pb2 as theirs

    assert described(ours) == described(theirs)
    assert ours.DESCRIPTOR.serialized_pb == theirs.DESCRIPTOR.serialized_pb


def test_every_method_of_every_service_is_served():
    services = ours.DESCRIPTOR.services_by_name
    assert tuple(f"tei.v1.{name}" for name in services) == SERVICE_NAMES
    for service in services.values():
        base = getattr(tei_pb2_grpc, f"{service.name}Servicer")
        for method in service.methods:
            served = getattr(TeiServices, method.name)
            assert served is not getattr(base, method.name), f"{service.name}.{method.name} is not served"
            assert inspect.iscoroutinefunction(served), method.name
