"""TEI's gRPC API as the benchmark loads it (``--endpoint grpc`` and ``grpc-stream``):
``tei.v1.Embed`` on the server's gRPC port (``--grpc-port``), each simulated client on a
channel of its own (one HTTP/2 connection), as each HTTP client keeps its own connection.

TEI's messages carry one text each, so a request of N inputs is N messages: with ``grpc``,
N unary ``Embed`` calls at once; with ``grpc-stream``, N messages written to the client's
one long-lived ``EmbedStream`` and its N responses read (the bulk client's way). One
benchmark request is one record either way, as over HTTP.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import grpc

from embedgate.bench.loadgen import RequestRecord
from embedgate.bench.payloads import Payload

GRPC_ENDPOINTS = ("grpc", "grpc-stream")
# What a refusal is called in the benchmark's records: the HTTP status the same refusal has.
STATUS_NAMES = {grpc.StatusCode.RESOURCE_EXHAUSTED: "429", grpc.StatusCode.UNAVAILABLE: "503",
                grpc.StatusCode.DEADLINE_EXCEEDED: "timeout", grpc.StatusCode.INVALID_ARGUMENT: "422"}


class GrpcClient:
    """One simulated user: its own channel, and with ``grpc-stream`` its own stream, opened
    at its first request and again after one broke."""

    def __init__(self, address: str, metadata: tuple[tuple[str, str], ...]):
        from embedgate.api.grpc.stubs import tei_pb2_grpc

        self.channel = grpc.aio.insecure_channel(address)
        self.stub = tei_pb2_grpc.EmbedStub(self.channel)
        self.metadata = metadata
        self.stream: grpc.aio.StreamStreamCall | None = None

    def open_stream(self) -> grpc.aio.StreamStreamCall:
        if self.stream is None or self.stream.done():
            self.stream = self.stub.EmbedStream(metadata=self.metadata)
        return self.stream

    async def close(self) -> None:
        if self.stream is not None:
            self.stream.cancel()
        await self.channel.close()


@dataclass(frozen=True)
class GrpcEndpoint:
    """``tei.v1.Embed`` at ``address`` for ``model`` (its ``x-model`` metadata)."""

    address: str
    model: str
    streamed: bool = False
    api_key: str | None = None

    @property
    def path(self) -> str:
        return "/tei.v1.Embed/EmbedStream" if self.streamed else "/tei.v1.Embed/Embed"

    def client(self) -> GrpcClient:
        metadata = (("x-model", self.model),)
        if self.api_key:
            metadata += (("authorization", f"Bearer {self.api_key}"),)
        return GrpcClient(self.address, metadata)

    async def send(self, client: GrpcClient, payload: Payload, index: int, timeout_s: float) -> RequestRecord:
        from embedgate.api.grpc.stubs import tei_pb2

        inputs = payload.inputs(index)
        messages = [tei_pb2.EmbedRequest(inputs=text, normalize=True, truncate=True) for text in inputs]
        started = time.perf_counter()
        try:
            async with asyncio.timeout(timeout_s):
                answers = await (self._streamed(client, messages) if self.streamed else self._unary(client, messages))
        except TimeoutError:
            if client.stream is not None:
                client.stream.cancel()  # a late answer must not be read as the next request's
            return RequestRecord(index, len(inputs), time.perf_counter() - started, "timeout")
        except grpc.aio.AioRpcError as error:
            status = STATUS_NAMES.get(error.code(), error.code().name.lower())
            return RequestRecord(index, len(inputs), time.perf_counter() - started, status)
        latency = time.perf_counter() - started
        if any(answer is grpc.aio.EOF for answer in answers):  # the server ended the stream
            return RequestRecord(index, len(inputs), latency, "connection_error")
        if len(answers) != len(inputs) or not all(answer.embeddings for answer in answers):
            return RequestRecord(index, len(inputs), latency, "bad_response")
        return RequestRecord(
            index, len(inputs), latency, "200", embeddings=len(answers),
            server_ms=max(answer.metadata.total_time_ns for answer in answers) / 1e6,
            zero_vectors=not any(answers[0].embeddings),
        )

    async def _unary(self, client: GrpcClient, messages: list) -> list:
        return list(await asyncio.gather(*(client.stub.Embed(m, metadata=client.metadata) for m in messages)))

    async def _streamed(self, client: GrpcClient, messages: list) -> list:
        stream = client.open_stream()
        for message in messages:
            await stream.write(message)
        return [await stream.read() for _ in messages]


def build_grpc_endpoint(name: str, url_host: str, port: int, model: str, api_key: str | None) -> GrpcEndpoint:
    return GrpcEndpoint(f"{url_host}:{port}", model, streamed=name == "grpc-stream", api_key=api_key)
