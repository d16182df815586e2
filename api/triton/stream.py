"""Inference over one long-lived gRPC stream to Triton (``ModelStreamInfer``).

CPU models are decoupled (``python_backend/model.py``: one instance runs several batches
at once and answers each request through its response sender), and Triton's HTTP
endpoint refuses decoupled models. Its gRPC stream takes any model. One stream carries
every call, each request tagged with an id of its own; a reader task hands each answer
to the call that waits for it, so a call costs one message each way, not a new stream.

The stream is grpclib's: HTTP/2 on the event loop's own socket, in Python. grpcio's
asyncio client runs a poller thread of its own, and every message then crossed between
threads (and the interpreter lock) twice: measured, the largest part of the gateway's own
CPU per request.

When the stream ends (Triton stopped or restarted), every call waiting on it fails as a
lost connection, and the next call opens a new stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable

import numpy as np
from grpclib.client import Channel, Stream
from grpclib.config import Configuration
from grpclib.const import Cardinality
from grpclib.exceptions import GRPCError, StreamTerminatedError
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException, np_to_triton_dtype, triton_to_np_dtype

from ..errors import TritonConnectionLost

log = logging.getLogger("embedgate.triton")

STREAM_METHOD = "/inference.GRPCInferenceService/ModelStreamInfer"
# HTTP/2 windows: requests of many images and answers of many rows are megabytes.
_WINDOW = 16 * 1024 * 1024
_CONFIG = Configuration(http2_connection_window_size=_WINDOW, http2_stream_window_size=_WINDOW)


def infer_request(
    model: str, tensors: dict[str, np.ndarray], output: str, timeout_s: float | None, version: str = ""
):
    """A ``ModelInferRequest``: ``tensors`` as raw little-endian bytes, ``output`` asked for,
    and Triton's own deadline for the time it queues the request; ``version``: one of the
    model's versions (a route's graph), "" for the model's only one."""
    request = service_pb2.ModelInferRequest(model_name=model, model_version=version)
    for name, array in tensors.items():
        array = np.ascontiguousarray(array)
        request.inputs.add(name=name, datatype=np_to_triton_dtype(array.dtype), shape=array.shape)
        request.raw_input_contents.append(array.tobytes())
    request.outputs.add(name=output)
    if timeout_s is not None:
        request.parameters["timeout"].int64_param = max(1, int(timeout_s * 1_000_000))
    return request


def output_array(response, name: str) -> np.ndarray:
    """The output ``name`` of a ``ModelInferResponse`` as a numpy array."""
    for index, tensor in enumerate(response.outputs):
        if tensor.name == name:
            dtype = triton_to_np_dtype(tensor.datatype)
            return np.frombuffer(response.raw_output_contents[index], dtype=dtype).reshape(tuple(tensor.shape))
    raise KeyError(f"Triton's answer has no output {name!r}")


# The first request of every stream (see _Stream): a model no repository has.
PRIMER_MODEL = "embedgate-stream-primer"
PRIMER_ID = "primer"


class _Stream:
    """One open ``ModelStreamInfer`` call: what it still owes, its writer and its reader."""

    def __init__(self, channel: Channel):
        self.outbox: asyncio.Queue = asyncio.Queue()
        self.waiting: dict[str, asyncio.Future] = {}
        # Request id -> (its model, when it was sent): what ``abandon`` looks at.
        self.sent: dict[str, tuple[str, float]] = {}
        self.call: Stream = channel.request(
            STREAM_METHOD, Cardinality.STREAM_STREAM, service_pb2.ModelInferRequest,
            service_pb2.ModelStreamInferResponse,
        )
        self.reader = asyncio.create_task(self._run(), name="triton-stream")
        # Triton holds on to the model of a stream's first request (an unload of it then
        # waits 30 s and more): the first request names no model, and its error answer is
        # dropped (no caller waits for its id).
        self.outbox.put_nowait(service_pb2.ModelInferRequest(model_name=PRIMER_MODEL, id=PRIMER_ID))

    @property
    def open(self) -> bool:
        return not self.reader.done()

    async def _write(self, stream: Stream) -> None:
        with contextlib.suppress(GRPCError, StreamTerminatedError, ConnectionError, OSError):
            while (request := await self.outbox.get()) is not None:
                await stream.send_message(request)
            await stream.end()
        # (a write that fails ends the stream: the reader fails what waits on it)

    async def _run(self) -> None:
        reason = "the inference server closed the stream"
        try:
            async with self.call as stream:
                await stream.send_request()
                writer = asyncio.create_task(self._write(stream), name="triton-stream-writer")
                try:
                    while (message := await stream.recv_message()) is not None:
                        self._deliver(message)
                finally:
                    writer.cancel()
        except (GRPCError, StreamTerminatedError, ConnectionError, OSError) as exc:
            reason = f"the stream to the inference server broke ({type(exc).__name__})"
        except asyncio.CancelledError:
            reason = "the stream was closed"
            raise
        finally:
            self._fail_waiting(reason)

    def _deliver(self, message) -> None:
        answer = self.waiting.pop(message.infer_response.id, None)
        self.sent.pop(message.infer_response.id, None)
        if answer is None or answer.done():
            return  # its caller gave up (deadline, cancelled)
        if message.error_message:
            answer.set_exception(InferenceServerException(message.error_message))
        else:
            answer.set_result(message.infer_response)

    def _fail_waiting(self, reason: str) -> None:
        waiting, self.waiting = self.waiting, {}
        self.sent = {}
        for answer in waiting.values():
            if not answer.done():
                answer.set_exception(TritonConnectionLost(f"{reason}; retry shortly"))

    def send(self, request) -> asyncio.Future:
        answer = asyncio.get_running_loop().create_future()
        self.waiting[request.id] = answer
        self.sent[request.id] = (request.model_name, time.monotonic())
        self.outbox.put_nowait(request)
        return answer

    def forget(self, request_id: str) -> None:
        self.waiting.pop(request_id, None)
        self.sent.pop(request_id, None)

    def abandon(self, model: str, sent_before: float, error: Callable[[], Exception]) -> int:
        """Fail the calls to ``model`` sent before ``sent_before`` with ``error()``; how many."""
        gone = [rid for rid, (name, at) in self.sent.items() if name == model and at < sent_before]
        for request_id in gone:
            self.sent.pop(request_id, None)
            answer = self.waiting.pop(request_id, None)
            if answer is not None and not answer.done():
                answer.set_exception(error())
        return len(gone)

    async def close(self) -> None:
        self.reader.cancel()
        await asyncio.gather(self.reader, return_exceptions=True)


class InferStream:
    """Calls to Triton over one gRPC stream, opened on first use and again after it ends."""

    def __init__(self, address: str):
        self.address = address
        self._channel: Channel | None = None
        self._stream: _Stream | None = None
        self._closing: set[asyncio.Task] = set()
        self._ids = itertools.count()

    def _open_stream(self) -> _Stream:
        """The open stream; a new one (on a new channel) where the last one ended. The
        old one is closed in the background, so calls that arrive meanwhile all take
        the new one."""
        if self._stream is None or not self._stream.open:
            old = (self._stream, self._channel)
            # A new channel too: a Triton that is back should be reached on a new connection.
            host, _, port = self.address.rpartition(":")
            self._channel = Channel(host, int(port), config=_CONFIG)
            self._stream = _Stream(self._channel)
            if old[0] is not None:
                closing = asyncio.create_task(self._close(*old), name="triton-stream-close")
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)
        return self._stream

    @staticmethod
    async def _close(stream: _Stream | None, channel: Channel | None) -> None:
        if stream is not None:
            await stream.close()
        if channel is not None:
            channel.close()

    async def infer(self, request):
        """Send ``request`` (a ``ModelInferRequest``) and return Triton's ``ModelInferResponse``.
        Raises ``InferenceServerException`` with Triton's message, or ``TritonConnectionLost``. A caller
        that stops waiting (its deadline) leaves no trace: a late answer is dropped."""
        stream = self._open_stream()
        request.id = str(next(self._ids))
        answer = stream.send(request)
        try:
            return await answer
        finally:
            stream.forget(request.id)

    def abandon(self, model: str, sent_before: float, error: Callable[[], Exception]) -> int:
        """Fail the calls waiting for ``model`` that were sent before ``sent_before`` (a
        monotonic time): a process that died will never answer them. Their answers, should
        any come, are dropped."""
        return self._stream.abandon(model, sent_before, error) if self._stream is not None else 0

    async def close(self) -> None:
        current, self._stream, channel, self._channel = self._stream, None, self._channel, None
        await self._close(current, channel)
        await asyncio.gather(*self._closing, return_exceptions=True)
