"""TEI's five gRPC services (``Info``, ``Embed``, ``Predict``, ``Rerank``, ``Tokenize``),
answered by the endpoints of TEI's HTTP routes: each method turns its message into the
route's body (``messages.py``), calls the route's endpoint within the call's envelope
(``calls.py``: key, model, deadline, status) and turns the answer into its response. A
``*Stream`` method calls the endpoint once per message (``streams.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

import grpc

from ..endpoints.envelope import Answer
from ..endpoints.tei import TEI_HEADERS
from ..errors import Empty
from ..http.tei.info import info
from ..settings import Settings
from . import messages
from .calls import Call, Calls
from .streams import answered_in_order
from .stubs import tei_pb2 as pb
from .stubs import tei_pb2_grpc as services

PACKAGE = "tei.v1"
# The services' full names, as the health and reflection services name them.
SERVICE_NAMES = tuple(f"{PACKAGE}.{name}" for name in ("Info", "Embed", "Predict", "Rerank", "Tokenize"))

Translate = Callable[[Any], Any]


async def _answer(call: Call, endpoint: str, body_of: Translate, request: Any) -> Answer:
    """One request's answer: its body, by the endpoint of its HTTP route."""
    return await getattr(call.tei, endpoint)(body_of(request), call.timeout_s(), call.model())


async def _answered(call: Call, endpoint: str, body_of: Translate, response_of: Translate, request: Any) -> Any:
    """One request's response."""
    return response_of(await _answer(call, endpoint, body_of, request))


def _tei_headers(answer: Answer) -> tuple[tuple[str, str], ...]:
    """TEI's timing headers of the answer, which TEI's unary responses carry as metadata too."""
    return tuple((name, value) for name, value in answer.headers.items() if name in TEI_HEADERS)


def unary(service: str, method: str, endpoint: str, body_of: Translate, response_of: Translate):
    """A method of one request, answered by the endpoint of its HTTP route."""
    path = f"/{PACKAGE}.{service}/{method}"

    async def handle(self: TeiServices, request: Any, context: grpc.aio.ServicerContext) -> Any:
        async with self.calls.call(context, path) as call:
            answer = await _answer(call, endpoint, body_of, request)
            response = response_of(answer)
            headers = _tei_headers(answer)
            if headers:
                await context.send_initial_metadata(headers)
            return response

    handle.__name__ = method
    return handle


def streamed(service: str, method: str, endpoint: str, body_of: Translate, response_of: Translate):
    """A stream of requests, each answered as the unary method answers it, in order.
    Responses are written by the handler itself (not yielded): a call the client cancels
    cancels the handler wherever it waits, which ends its requests in flight."""
    path = f"/{PACKAGE}.{service}/{method}"

    async def handle(self: TeiServices, requests: AsyncIterable[Any], context: grpc.aio.ServicerContext) -> None:
        async with self.calls.call(context, path) as call:
            async def one(request: Any) -> Any:
                response = await _answered(call, endpoint, body_of, response_of, request)
                call.record.messages += 1
                return response

            # Closed as the handler ends, however it ends: its requests in flight are cancelled with it.
            async with aclosing(answered_in_order(requests, one, self.window)) as responses:
                async for response in responses:
                    await context.write(response)  # waits while the client reads slower than it is answered

    handle.__name__ = method
    return handle


class TeiServices(
    services.InfoServicer, services.EmbedServicer, services.PredictServicer, services.RerankServicer,
    services.TokenizeServicer,
):
    """Every method of TEI's gRPC API, for one gateway's endpoints."""

    def __init__(self, calls: Calls, settings: Settings):
        self.calls = calls
        self.settings = settings
        self.window = settings.grpc_stream_window

    async def Info(self, request: pb.InfoRequest, context: grpc.aio.ServicerContext) -> pb.InfoResponse:
        async with self.calls.call(context, f"/{PACKAGE}.Info/Info") as call:
            async def described(model: Any, _: float) -> Answer:
                return Answer(info(model, self.settings), {})

            answer = await call.tei.for_model(call.model(), call.timeout_s(), described)
            return messages.info_response(answer.body)

    Embed = unary("Embed", "Embed", "embed", messages.embed_body, messages.embed_response)
    EmbedStream = streamed("Embed", "EmbedStream", "embed", messages.embed_body, messages.embed_response)
    EmbedSparse = unary(
        "Embed", "EmbedSparse", "embed_sparse", messages.embed_sparse_body, messages.embed_sparse_response
    )
    EmbedSparseStream = streamed(
        "Embed", "EmbedSparseStream", "embed_sparse", messages.embed_sparse_body, messages.embed_sparse_response
    )
    EmbedAll = unary("Embed", "EmbedAll", "embed_all", messages.embed_all_body, messages.embed_all_response)
    EmbedAllStream = streamed(
        "Embed", "EmbedAllStream", "embed_all", messages.embed_all_body, messages.embed_all_response
    )

    Predict = unary("Predict", "Predict", "predict", messages.predict_body, messages.predict_response)
    PredictPair = unary("Predict", "PredictPair", "predict", messages.predict_pair_body, messages.predict_response)
    PredictStream = streamed("Predict", "PredictStream", "predict", messages.predict_body, messages.predict_response)
    PredictPairStream = streamed(
        "Predict", "PredictPairStream", "predict", messages.predict_pair_body, messages.predict_response
    )

    Rerank = unary("Rerank", "Rerank", "rerank", messages.rerank_body,
                   lambda answer: messages.rerank_response(messages.ranks(answer), [answer]))

    async def RerankStream(self, requests: AsyncIterable[pb.RerankStreamRequest],
                           context: grpc.aio.ServicerContext) -> pb.RerankResponse:
        """Every text of the stream ranked: consecutive texts of one query are asked as one
        rerank request of at most ``max_texts_per_request`` texts, as soon as they have come
        (at most ``grpc_stream_window`` in flight), and the ranks of all are merged."""
        async with self.calls.call(context, f"/{PACKAGE}.Rerank/RerankStream") as call:
            most = self.settings.max_texts_per_request

            async def groups() -> AsyncIterator[tuple[int, pb.RerankStreamRequest, list[pb.RerankStreamRequest]]]:
                first: pb.RerankStreamRequest | None = None
                group: list[pb.RerankStreamRequest] = []
                offset = 0
                async for message in requests:
                    call.record.messages += 1
                    first = first or message
                    if group and (len(group) == most or not messages.same_rerank(group[0], message)):
                        yield offset, first, group
                        offset += len(group)
                        group = []
                    group.append(message)
                if not group:
                    raise Empty("`texts` cannot be empty")
                yield offset, first, group  # type: ignore[misc]

            async def ranked(item: tuple[int, pb.RerankStreamRequest, list[pb.RerankStreamRequest]]
                             ) -> tuple[list[pb.Rank], Answer]:
                offset, first, group = item
                body = messages.rerank_stream_body(first, group)
                answer = await call.tei.rerank(body, call.timeout_s(), call.model())
                return messages.ranks(answer, offset), answer

            ranks: list[pb.Rank] = []
            answers: list[Answer] = []
            async with aclosing(answered_in_order(groups(), ranked, self.window)) as parts:
                async for part, answer in parts:
                    ranks += part
                    answers.append(answer)
            return messages.rerank_response(ranks, answers)

    Tokenize = unary("Tokenize", "Tokenize", "tokenize", messages.tokenize_body, messages.tokenize_response)
    TokenizeStream = streamed(
        "Tokenize", "TokenizeStream", "tokenize", messages.tokenize_body, messages.tokenize_response
    )
    Decode = unary("Tokenize", "Decode", "decode", messages.decode_body, messages.decode_response)
    DecodeStream = streamed("Tokenize", "DecodeStream", "decode", messages.decode_body, messages.decode_response)


def add_services(servicer: TeiServices, server: grpc.aio.Server) -> None:
    services.add_InfoServicer_to_server(servicer, server)
    services.add_EmbedServicer_to_server(servicer, server)
    services.add_PredictServicer_to_server(servicer, server)
    services.add_RerankServicer_to_server(servicer, server)
    services.add_TokenizeServicer_to_server(servicer, server)
