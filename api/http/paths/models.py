"""Model management: load (converting when needed), unload, delete, list."""

from typing import Any

from fastapi import APIRouter, Depends, Request
from starlette.responses import StreamingResponse

from embedgate.contract.spec import ModelMetadata

from ...compute.requests.kinds import kind_of
from ...compute.requests.served import ServedModel
from ...endpoints.schemas.listings import ModelInfo, ModelList, RouteListing
from ...endpoints.schemas.management import (
    LoadClipRequest,
    LoadClipResponse,
    LoadResponse,
    LoadSentenceTransformerRequest,
    MessageResponse,
    ModelRequest,
)
from ...gateway import Gateway
from ...models.names import clip_key, clip_triton_name, validate_model_name
from ...models.progress import Progress
from ..openapi import errors
from ..routing import BodyRoute
from . import get_gateway
from .progress_stream import STREAM_RESPONSE, progress_stream, wants_progress

# Changes to what is loaded: admin key when admin keys are set.
router = APIRouter(tags=["models"], route_class=BodyRoute)
# Reading what exists: any API key.
listing = APIRouter(tags=["models"])

# 403: trust_remote_code, a path outside the allowed directories, hub downloads off or a gated
# model refused; 502/504: the hub failing or timing out; 507: no disk for a conversion.
LOAD_ANSWERS = {**errors(400, 403, 404, 409, 413, 415, 422, 500, 502, 503, 504, 507), **STREAM_RESPONSE}
CHANGE_ANSWERS = errors(400, 404, 409, 413, 415, 422, 500, 502, 503, 504)
READ_ANSWERS = errors(500, 503)


def _described(metadata: ModelMetadata) -> dict[str, Any]:
    """What a load's answer and the listings both say of a model, from its metadata."""
    return {
        "kind": metadata.kind,
        "embedding_dim": metadata.embedding_dim,
        "max_seq_length": metadata.max_seq_length,
        "variant": metadata.variant.name if metadata.variant else None,
        "parity_min_cosine": metadata.parity.min_cosine,
        "made_from": metadata.made_from,
    }


def _info(metadata: ModelMetadata, loaded: bool, gpu_memory: dict[str, int] | None = None) -> ModelInfo:
    kind = kind_of(metadata)
    parts = list(kind.triton_parts(metadata.triton_name))
    reported = [gpu_memory[part] for part in parts if part in (gpu_memory or {})]
    return ModelInfo(
        **_described(metadata),
        model_name=metadata.model_name,
        triton_name=metadata.triton_name,
        triton_parts=parts,
        normalized=metadata.normalized,
        form=metadata.form,
        source=metadata.source,
        loaded=loaded,
        parity_mean_cosine=metadata.parity.mean_cosine,
        gpu_dtype=metadata.gpu.dtype if metadata.gpu else None,
        gpu_parity_min_cosine=metadata.gpu.parity.min_cosine if metadata.gpu else None,
        gpu_memory_bytes=sum(reported) if reported else None,
        prompts=metadata.prompts,
        default_prompt_name=metadata.default_prompt_name,
        prompts_refused=metadata.prompts_refused,
        routes=_routes(metadata),
        **kind.listing(),
    )


def _routes(metadata: ModelMetadata) -> list[RouteListing] | None:
    if not metadata.routes:
        return None
    return [
        RouteListing(name=route.name, tasks=route.tasks, runs_on="gateway" if route.version is None else "triton")
        for route in metadata.routes
    ]


def _terms(body: LoadSentenceTransformerRequest | LoadClipRequest) -> dict[str, Any]:
    """What the load says of the model's stay (``models/residency.py``), where it says it."""
    terms = {"keep_alive": body.keep_alive, "pinned": body.pinned}
    return {name: value for name, value in terms.items() if value is not None}


def _outcome(already_loaded: bool, described: str) -> tuple[str, str]:
    """The status and the seed-style message of a load."""
    if already_loaded:
        return "already_loaded", f"Model {described} is already loaded."
    return "loaded", f"Model {described} loaded."


@router.post(
    "/load_sentence_transformer_model",
    response_model=LoadResponse,
    responses=LOAD_ANSWERS,
)
async def load_sentence_transformer_model(
    body: LoadSentenceTransformerRequest, request: Request, gateway: Gateway = Depends(get_gateway)
) -> LoadResponse | StreamingResponse:
    # optimize / quantize load a variant: a model of its own, "<model_name>@<variant>".
    name = body.served_name()

    async def load(progress: Progress | None = None) -> LoadResponse:
        outcome = await gateway.models.load_sentence_transformer(
            name,
            body.model_path,
            trust_remote_code=body.trust_remote_code,
            revision=body.revision,
            on_source_change=body.on_source_change,
            progress=progress,
            **_terms(body),
        )
        model: ServedModel = outcome.model
        metadata = model.metadata
        status, message = _outcome(outcome.already_loaded, model.name)
        return LoadResponse(
            **_described(metadata), model_name=model.name, status=status, converted=outcome.converted, message=message
        )

    if wants_progress(request):
        validate_model_name(name)  # a bad name is a plain 422, not a stream
        return progress_stream(name, load)
    return await load()


@router.post("/load_clip_model", response_model=LoadClipResponse, responses=LOAD_ANSWERS)
async def load_clip_model(
    body: LoadClipRequest, request: Request, gateway: Gateway = Depends(get_gateway)
) -> LoadClipResponse | StreamingResponse:
    """Convert (first time only) and load an OpenCLIP model: its text and image towers
    become two Triton models, served as one model."""

    async def load(progress: Progress | None = None) -> LoadClipResponse:
        outcome = await gateway.models.load_clip(
            body.model_name, body.pretrained, revision=body.revision, on_source_change=body.on_source_change,
            progress=progress, **_terms(body),
        )
        metadata = outcome.model.metadata
        status, message = _outcome(outcome.already_loaded, f"{body.model_name} ({body.pretrained})")
        return LoadClipResponse(
            **_described(metadata), model_name=body.model_name, pretrained=body.pretrained, status=status,
            converted=outcome.converted, image_size=outcome.model.kind.listing()["image_size"], message=message,
        )

    if wants_progress(request):
        clip_triton_name(body.model_name, body.pretrained)  # a bad name is a plain 422, not a stream
        return progress_stream(clip_key(body.model_name, body.pretrained), load)
    return await load()


def _named(body: ModelRequest) -> str:
    return body.model_name if body.pretrained is None else f"{body.model_name} ({body.pretrained})"


@router.post("/unload_model", response_model=MessageResponse, responses=CHANGE_ANSWERS)
async def unload_model(body: ModelRequest, gateway: Gateway = Depends(get_gateway)) -> MessageResponse:
    await gateway.models.unload(body.model_name, body.pretrained)
    return MessageResponse(message=f"Model {_named(body)} unloaded.")


@router.post("/delete_model", response_model=MessageResponse, responses=CHANGE_ANSWERS)
async def delete_model(body: ModelRequest, gateway: Gateway = Depends(get_gateway)) -> MessageResponse:
    await gateway.models.delete(body.model_name, body.pretrained)
    return MessageResponse(message=f"Model {_named(body)} deleted.")


@listing.get("/loaded_models", response_model=ModelList, responses=READ_ANSWERS)
async def loaded_models(gateway: Gateway = Depends(get_gateway)) -> ModelList:
    gpu_memory = await gateway.gpu_memory()
    residency = gateway.registry.residency
    memory = await residency.figures()
    terms = await residency.listed_terms()  # a gateway worker's primary keeps what each load said
    return ModelList(
        models=[
            _info(m.metadata, True, gpu_memory).model_copy(
                update={
                    "memory_bytes": memory.get(m.name, {}).get("host"),
                    "pinned": terms[m.name][0] if m.name in terms else None,
                    "keep_alive_s": terms[m.name][1] if m.name in terms else None,
                }
            )
            for m in gateway.registry.loaded()
        ]
    )


@listing.get("/repository_models", response_model=ModelList, responses=READ_ANSWERS)
async def repository_models(gateway: Gateway = Depends(get_gateway)) -> ModelList:
    loaded = {m.triton_name for m in gateway.registry.loaded()}
    return ModelList(
        models=[_info(md, md.triton_name in loaded) for md in await gateway.registry.on_disk()]
    )
