"""TEI's Python client (tei-client's ``GrpcClient``) given the metadata it cannot send itself
(the key, the model's name), through interceptors on its channels, sync and asyncio; and
texts embedded over connections of their own, for the tests of several processes sharing
a gRPC port."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import grpc
import numpy as np


class AddMetadata(grpc.UnaryUnaryClientInterceptor, grpc.StreamStreamClientInterceptor,
                  grpc.StreamUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """What a client that cannot send metadata itself is given (tei-client's ``GrpcClient``
    takes none): the key, and the model it calls."""

    def __init__(self, metadata):
        self.metadata = metadata

    def _details(self, details):
        return details._replace(metadata=(*(details.metadata or ()), *self.metadata))

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    intercept_unary_stream = intercept_unary_unary

    def intercept_stream_unary(self, continuation, details, requests):
        return continuation(self._details(details), requests)

    intercept_stream_stream = intercept_stream_unary


class _AsyncMetadata:
    def __init__(self, metadata):
        self.metadata = metadata

    def _details(self, details):
        return details._replace(metadata=grpc.aio.Metadata(*(details.metadata or ()), *self.metadata))


class AsyncUnaryMetadata(_AsyncMetadata, grpc.aio.UnaryUnaryClientInterceptor):
    """:class:`AddMetadata` for an asyncio channel's unary calls (the channel takes an
    interceptor for one kind of call only)."""

    async def intercept_unary_unary(self, continuation, details, request):
        return await continuation(self._details(details), request)


class AsyncStreamMetadata(_AsyncMetadata, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation, details, requests):
        return await continuation(self._details(details), requests)


def tei_client(address: str, metadata: tuple[tuple[str, str], ...]):
    """tei-client's ``GrpcClient`` at ``address``, its calls (sync and async) carrying
    ``metadata``. Made where an event loop is current: the client opens its asyncio channel
    at once."""
    from tei_client import GrpcClient
    from tei_client.clients.grpc_client import Stubs

    try:
        asyncio.get_event_loop()
    except RuntimeError:
        asyncio.set_event_loop(asyncio.new_event_loop())
    client = GrpcClient(address)
    client._stubs = Stubs(grpc.intercept_channel(client.channel, AddMetadata(metadata)))
    interceptors = [AsyncUnaryMetadata(metadata), AsyncStreamMetadata(metadata)]
    client._async_stubs = Stubs(grpc.aio.insecure_channel(address, interceptors=interceptors))
    return client


@contextlib.contextmanager
def embedded_on_connections(port: int, texts: list[str], model: str) -> Iterator[np.ndarray]:
    """Each text embedded over a connection of its own to ``port`` (TEI's gRPC ``Embed``):
    the vectors, while the connections are still open (the processes that accepted them
    hold them, for a test to count)."""
    from embedgate.api.grpc.stubs import tei_pb2, tei_pb2_grpc

    # A connection of each channel's own (channels of one process share them unless told).
    channels = [grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in texts]
    try:
        answers = [
            tei_pb2_grpc.EmbedStub(channel).Embed(tei_pb2.EmbedRequest(inputs=text, normalize=True),
                                                  metadata=(("x-model", model),), timeout=120)
            for channel, text in zip(channels, texts)
        ]
        yield np.asarray([answer.embeddings for answer in answers])
    finally:
        for channel in channels:
            channel.close()
