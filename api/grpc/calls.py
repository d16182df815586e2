"""What every call of TEI's gRPC API goes through before and after its endpoint: counted and
timed (``telemetry/rpcs.py``), its key checked from the ``authorization`` metadata as the
HTTP routes check the header (``http/auth.py``), its model found from the ``x-model``
metadata (else the default model of ``/tei``, by the same rule), its deadline the gRPC
deadline (within ``max_request_timeout_s``; the server's ``request_timeout_s`` without
one), and any error answered as the status TEI would answer (``statuses.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import grpc

from ..compute.requests.served import ServedModel
from ..compute.scheduling.tenants import serve_as
from ..endpoints import TeiEndpoints
from ..endpoints.envelope import Unloaded
from ..errors import DeadlineExceeded
from ..http.auth import KeyRing
from ..settings import Settings
from ..telemetry import tag_key
from ..telemetry.rpcs import CLIENT_CLOSED, RpcRecord, observed_rpc
from .statuses import rpc_error_of

# The metadata key that names the model (TEI serves one model per process; here the name
# of any loaded model, ``<model_name>:<pretrained>`` for a CLIP model's text tower).
MODEL_KEY = "x-model"


@dataclass
class Call:
    """One call in progress: its endpoints, the model it names (None: the default), and
    its deadline, read again for each request of a stream."""

    tei: TeiEndpoints
    model_key: str | None
    record: RpcRecord
    calls: Calls
    context: grpc.aio.ServicerContext

    def timeout_s(self) -> float:
        return self.calls.timeout_s(self.context)

    def model(self) -> ServedModel | Unloaded:
        """The model the call names, found again for each request of a stream (a model
        unloaded in between is then refused, as an HTTP request would be)."""
        return self.tei.model_named(self.model_key) if self.model_key else self.tei.default_model()


class Calls:
    """The envelope of every call, for one gateway's endpoints."""

    def __init__(self, tei: TeiEndpoints, keyring: KeyRing, settings: Settings):
        self.tei = tei
        self.keyring = keyring
        self.settings = settings

    def timeout_s(self, context: grpc.aio.ServicerContext) -> float:
        remaining = context.time_remaining()
        if remaining is None:
            return self.settings.request_timeout_s
        if remaining <= 0:
            raise DeadlineExceeded("the call's deadline passed before it was answered")
        return min(remaining, self.settings.max_request_timeout_s)

    @asynccontextmanager
    async def call(self, context: grpc.aio.ServicerContext, method: str) -> AsyncIterator[Call]:
        """The call of ``method`` checked, then answered; an error aborts it with its status."""
        with observed_rpc(method) as record:
            try:
                metadata = dict(context.invocation_metadata() or ())
                tenant = self.keyring.check(metadata.get("authorization"), admin=False)
                if tenant is not None:
                    serve_as(tenant)
                    tag_key(tenant.label)
                self.timeout_s(context)  # a deadline already passed refuses the call at once
                yield Call(self.tei, metadata.get(MODEL_KEY) or None, record, self, context)
            except grpc.aio.AbortError:
                raise
            except asyncio.CancelledError:
                # The client cancelled, or went away: gRPC cancels the method's task.
                record.code, record.status = grpc.StatusCode.CANCELLED.name, CLIENT_CLOSED
                raise
            except Exception as error:  # noqa: BLE001 - every error is a status (statuses.py)
                status = rpc_error_of(error)
                record.code, record.status = status.code.name, status.status
                record.record.error_code = status.error_code
                await context.abort(status.code, status.message, status.trailers)
