"""TritonClient's inference against a small gRPC server that answers like Triton's stream."""

from __future__ import annotations

import asyncio

import grpc
import numpy as np
import pytest
import pytest_asyncio
from tritonclient.grpc import service_pb2, service_pb2_grpc

from embedgate.api.errors import DeadlineExceeded, Overloaded, TritonConnectionLost
from embedgate.api.triton import stream
from embedgate.api.triton.client import TritonClient
from embedgate.api.triton.stream import output_array


class FakeTriton(service_pb2_grpc.GRPCInferenceServiceServicer):
    """Answers each request with its ``input_ids`` times two, after ``delay`` seconds
    (per model), in whatever order the answers are ready; ``error`` (per model) answers
    with that message instead."""

    def __init__(self):
        self.seen: list[service_pb2.ModelInferRequest] = []
        self.delay: dict[str, float] = {}
        self.error: dict[str, str] = {}
        self.streams = 0

    async def ModelStreamInfer(self, request_iterator, context):  # noqa: N802 - gRPC's name
        self.streams += 1
        answers: asyncio.Queue = asyncio.Queue()

        async def answer(request):
            await asyncio.sleep(self.delay.get(request.model_name, 0.0))
            message = service_pb2.ModelStreamInferResponse()
            message.infer_response.id = request.id
            if request.model_name in self.error:
                message.error_message = self.error[request.model_name]
            elif not request.inputs:  # as Triton answers a request for a model it lacks
                message.error_message = f"Request for unknown model: '{request.model_name}' is not found"
            else:
                shape = tuple(request.inputs[0].shape)
                ids = np.frombuffer(request.raw_input_contents[0], dtype=np.int64).reshape(shape)
                out = message.infer_response.outputs.add(name="embedding", datatype="FP32", shape=shape)
                assert out.name == request.outputs[0].name
                message.infer_response.raw_output_contents.append((ids * 2).astype(np.float32).tobytes())
            await answers.put(message)

        async def read():
            async for request in request_iterator:
                self.seen.append(request)
                asyncio.ensure_future(answer(request))

        reader = asyncio.ensure_future(read())
        try:
            while True:
                yield await answers.get()
        finally:
            reader.cancel()


async def start_server(fake: FakeTriton, port: int) -> grpc.aio.Server:
    server = grpc.aio.server()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(fake, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server


# The server runs in each test's own event loop (fixtures default to the session's).
@pytest_asyncio.fixture(loop_scope="function")
async def fake_triton(unused_tcp_port):
    fake = FakeTriton()
    server = await start_server(fake, unused_tcp_port)
    fake.port = unused_tcp_port
    fake.server = server
    yield fake
    await fake.server.stop(None)


@pytest_asyncio.fixture(loop_scope="function")
async def client(fake_triton):
    # The control client's HTTP address is not used by inference.
    client = TritonClient("127.0.0.1:1", f"127.0.0.1:{fake_triton.port}", control_timeout_s=5)
    yield client
    await client.close()


def ids(rows: int, value: int) -> np.ndarray:
    return np.full((rows, 4), value, dtype=np.int64)


async def test_calls_share_one_stream_and_each_gets_its_own_answer(fake_triton, client):
    # The first call's answer comes last: answers are matched by request id, not order.
    fake_triton.delay["slow"] = 0.2
    slow = asyncio.create_task(client.infer("slow", {"input_ids": ids(1, 7)}, "embedding", timeout_s=5))
    await asyncio.sleep(0.05)
    fast = await asyncio.gather(
        *[client.infer("m", {"input_ids": ids(n, n), "attention_mask": ids(n, 1)}, "embedding", timeout_s=5) for n in (1, 2, 3)]
    )

    for n, vectors in zip((1, 2, 3), fast):
        np.testing.assert_array_equal(vectors, np.full((n, 4), 2 * n, dtype=np.float32))
    np.testing.assert_array_equal(await slow, np.full((1, 4), 14, dtype=np.float32))
    assert fake_triton.streams == 1
    request = fake_triton.seen[-1]
    assert [(t.name, t.datatype, list(t.shape)) for t in request.inputs] == [
        ("input_ids", "INT64", [3, 4]),
        ("attention_mask", "INT64", [3, 4]),
    ]
    # Triton drops a request still queued at the call's deadline.
    assert request.parameters["timeout"].int64_param == 5_000_000
    # The stream opens with a request for no model (Triton holds on to the model of a
    # stream's first request, and an unload of it would wait); then one per call.
    primer, *calls = fake_triton.seen
    assert (primer.model_name, primer.id) == (stream.PRIMER_MODEL, stream.PRIMER_ID)
    assert len({r.id for r in calls}) == 4 and stream.PRIMER_ID not in {r.id for r in calls}


async def test_a_slow_answer_is_a_deadline_and_its_late_answer_is_dropped(fake_triton, client):
    fake_triton.delay["slow"] = 0.5

    with pytest.raises(DeadlineExceeded):
        await client.infer("slow", {"input_ids": ids(1, 1)}, "embedding", timeout_s=0.1)
    await asyncio.sleep(0.6)  # the late answer arrives on the stream

    vectors = await client.infer("m", {"input_ids": ids(1, 3)}, "embedding", timeout_s=5)
    np.testing.assert_array_equal(vectors, np.full((1, 4), 6, dtype=np.float32))
    assert fake_triton.streams == 1


async def test_tritons_error_message_is_mapped_for_that_call_only(fake_triton, client):
    fake_triton.error["full"] = "Exceeds maximum queue size"

    results = await asyncio.gather(
        client.infer("full", {"input_ids": ids(1, 1)}, "embedding", timeout_s=5),
        client.infer("m", {"input_ids": ids(1, 2)}, "embedding", timeout_s=5),
        return_exceptions=True,
    )

    assert isinstance(results[0], Overloaded)
    np.testing.assert_array_equal(results[1], np.full((1, 4), 4, dtype=np.float32))


async def test_calls_on_a_stream_that_breaks_are_lost_connections_and_the_next_call_opens_another(
    fake_triton, client
):
    fake_triton.delay["slow"] = 10
    waiting = asyncio.create_task(client.infer("slow", {"input_ids": ids(1, 1)}, "embedding", timeout_s=30))
    await asyncio.sleep(0.2)

    await fake_triton.server.stop(None)  # Triton stops
    with pytest.raises(TritonConnectionLost):
        await asyncio.wait_for(waiting, 10)
    with pytest.raises(TritonConnectionLost):
        await client.infer("m", {"input_ids": ids(1, 1)}, "embedding", timeout_s=5)

    fake_triton.server = await start_server(fake_triton, fake_triton.port)  # and is back
    answers = await asyncio.gather(
        *[client.infer("m", {"input_ids": ids(1, n)}, "embedding", timeout_s=5) for n in range(5)]
    )
    for n, vectors in enumerate(answers):
        np.testing.assert_array_equal(vectors, np.full((1, 4), 2 * n, dtype=np.float32))
    assert fake_triton.streams == 2  # the calls that came together share the new stream


def test_an_answer_is_read_by_its_output_name():
    response = service_pb2.ModelInferResponse()
    response.outputs.add(name="other", datatype="FP32", shape=[1])
    response.raw_output_contents.append(np.float32(9).tobytes())
    response.outputs.add(name="embedding", datatype="FP32", shape=[2, 2])
    response.raw_output_contents.append(np.arange(4, dtype=np.float32).tobytes())

    np.testing.assert_array_equal(output_array(response, "embedding"), np.arange(4, dtype=np.float32).reshape(2, 2))
    with pytest.raises(KeyError):
        output_array(response, "missing")
