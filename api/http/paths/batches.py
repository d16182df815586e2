"""OpenAI's Files and Batch APIs, for bulk embedding jobs (``api/jobs/``): upload a JSONL
file of requests, create a batch from it, follow it, cancel it, download its output.

``POST /v1/files``, ``GET /v1/files``, ``GET /v1/files/{id}``, ``GET /v1/files/{id}/content``,
``DELETE /v1/files/{id}``; ``POST /v1/batches``, ``GET /v1/batches``,
``GET /v1/batches/{id}``, ``POST /v1/batches/{id}/cancel``. The official ``openai`` client's
``files.create``, ``batches.create``, ``batches.retrieve``, ``batches.cancel`` and
``files.content`` work against them unchanged.

With keys, each key finds only its own files and batches (another key's id answers 404
exactly as an unknown one); an admin key finds every key's. Without keys, everything is
everyone's, as before.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, File, Form, Query, UploadFile
from fastapi import Path as PathParam
from starlette.responses import StreamingResponse

from ...compute.scheduling.tenants import Tenant
from ...endpoints.schemas.batches import (
    BatchCreateRequest,
    BatchError,
    BatchErrors,
    BatchFields,
    BatchList,
    BatchObject,
    BatchUsage,
    FileDeleted,
    FileList,
    FileObject,
    RequestCounts,
)
from ...gateway import Gateway
from ...jobs.records import BatchRecord, FileRecord, Progress
from ...jobs.service import BatchView
from ...jobs.store import EVERYTHING, Access
from ..auth import require_api_key
from ..openapi import openai_errors
from ..routing import BodyRoute
from . import get_gateway

router = APIRouter(prefix="/v1", tags=["bulk jobs"], route_class=BodyRoute)

FileId = Annotated[str, PathParam(min_length=1, max_length=200, examples=["file-0123456789abcdef01234567"])]
BatchId = Annotated[str, PathParam(min_length=1, max_length=200, examples=["batch_0123456789abcdef01234567"])]
UPLOAD_BLOCK = 1 << 20


async def job_access(tenant: Tenant | None = Depends(require_api_key)) -> Access:
    """Whose files and batches the caller finds (the key check runs once a request: this
    is the router's own, cached)."""
    if tenant is None:  # no keys configured
        return EVERYTHING
    return Access(owner=tenant.owner, everything=tenant.admin)


Caller = Annotated[Access, Depends(job_access)]


def _file(record: FileRecord) -> FileObject:
    return FileObject(
        id=record.id, bytes=record.bytes, created_at=record.created_at, filename=record.filename, purpose=record.purpose
    )


def batch_object(batch: BatchRecord, progress: Progress) -> BatchObject:
    """OpenAI's batch object for ``batch``: the fields it shares with the store's record as
    they are, what it adds worked out from its chunks' ``progress``."""
    failed = progress.failed
    if batch.status == "expired":  # requests that never ran count as failed, as OpenAI counts them
        failed = batch.total - progress.completed
    return BatchObject(
        **{name: getattr(batch, name) for name in BatchFields.model_fields},
        errors=BatchErrors(data=[BatchError(**error) for error in batch.errors]) if batch.errors else None,
        request_counts=RequestCounts(total=batch.total, completed=progress.completed, failed=failed),
        usage=BatchUsage(input_tokens=progress.tokens, total_tokens=progress.tokens),
    )


def _batch(view: BatchView) -> BatchObject:
    return batch_object(view.batch, view.progress)


@router.post("/files", response_model=FileObject, responses=openai_errors(400, 413, 415, 422, 500, 503))
async def upload_file(
    file: Annotated[UploadFile, File(description="A JSONL file: one request per line, OpenAI's batch input format.")],
    purpose: Annotated[Literal["batch"], Form(description="What the file is for: batch input.")],
    access: Caller,
    gateway: Gateway = Depends(get_gateway),
) -> FileObject:
    with tempfile.TemporaryDirectory(prefix="embedgate-upload-") as scratch:
        path = Path(scratch) / "upload.jsonl"
        await asyncio.to_thread(_save, file, path)
        record = await gateway.jobs.upload(file.filename or "upload.jsonl", purpose, path, access)
    return _file(record)


def _save(upload: UploadFile, path: Path) -> None:
    upload.file.seek(0)
    with path.open("wb") as target:
        shutil.copyfileobj(upload.file, target, UPLOAD_BLOCK)


@router.get("/files", response_model=FileList, responses=openai_errors(400, 500, 503))
async def list_files(
    access: Caller,
    purpose: Annotated[str | None, Query(max_length=100)] = None,
    gateway: Gateway = Depends(get_gateway),
) -> FileList:
    return FileList(data=[_file(record) for record in await gateway.jobs.list_files(purpose, access)])


@router.get("/files/{file_id}", response_model=FileObject, responses=openai_errors(400, 404, 500, 503))
async def retrieve_file(file_id: FileId, access: Caller, gateway: Gateway = Depends(get_gateway)) -> FileObject:
    return _file(await gateway.jobs.file(file_id, access))


@router.get(
    "/files/{file_id}/content",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/jsonl": {}}}, **openai_errors(400, 404, 500, 503)},
)
async def file_content(file_id: FileId, access: Caller, gateway: Gateway = Depends(get_gateway)) -> StreamingResponse:
    return StreamingResponse(await gateway.jobs.content(file_id, access), media_type="application/jsonl")


@router.delete("/files/{file_id}", response_model=FileDeleted, responses=openai_errors(400, 404, 500, 503))
async def delete_file(file_id: FileId, access: Caller, gateway: Gateway = Depends(get_gateway)) -> FileDeleted:
    await gateway.jobs.delete_file(file_id, access)
    return FileDeleted(id=file_id, deleted=True)


@router.post("/batches", response_model=BatchObject, responses=openai_errors(400, 404, 413, 415, 500, 503))
async def create_batch(
    body: BatchCreateRequest, access: Caller, gateway: Gateway = Depends(get_gateway)
) -> BatchObject:
    view = await gateway.jobs.create_batch(
        body.input_file_id, body.endpoint, body.completion_window, body.metadata, access
    )
    return _batch(view)


@router.get("/batches", response_model=BatchList, responses=openai_errors(400, 500, 503))
async def list_batches(
    access: Caller,
    after: Annotated[str | None, Query(max_length=200, description="The last id of the previous page.")] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    gateway: Gateway = Depends(get_gateway),
) -> BatchList:
    views = await gateway.jobs.list_batches(after, limit + 1, access)
    data = [_batch(view) for view in views[:limit]]
    return BatchList(
        data=data,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
        has_more=len(views) > limit,
    )


@router.get("/batches/{batch_id}", response_model=BatchObject, responses=openai_errors(400, 404, 500, 503))
async def retrieve_batch(batch_id: BatchId, access: Caller, gateway: Gateway = Depends(get_gateway)) -> BatchObject:
    return _batch(await gateway.jobs.batch(batch_id, access))


@router.post(
    "/batches/{batch_id}/cancel", response_model=BatchObject, responses=openai_errors(400, 404, 409, 415, 500, 503)
)
async def cancel_batch(batch_id: BatchId, access: Caller, gateway: Gateway = Depends(get_gateway)) -> BatchObject:
    return _batch(await gateway.jobs.cancel(batch_id, access))
