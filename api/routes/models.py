"""Model management: load (converting when needed), unload, delete, list."""

from fastapi import APIRouter, Depends

from ..gateway import Gateway
from ..registry import ServedModel
from ..schemas import (
    LoadResponse,
    LoadSentenceTransformerRequest,
    MessageResponse,
    ModelInfo,
    ModelList,
    ModelRequest,
)
from . import ERRORS, get_gateway

router = APIRouter(tags=["models"])


def _info(metadata, loaded: bool) -> ModelInfo:
    return ModelInfo(
        model_name=metadata.model_name,
        triton_name=metadata.triton_name,
        kind=metadata.kind,
        embedding_dim=metadata.embedding_dim,
        max_seq_length=metadata.max_seq_length,
        normalized=metadata.normalized,
        form=metadata.form,
        source=metadata.source,
        loaded=loaded,
    )


@router.post("/load_sentence_transformer_model", response_model=LoadResponse, responses=ERRORS)
async def load_sentence_transformer_model(
    body: LoadSentenceTransformerRequest, gateway: Gateway = Depends(get_gateway)
) -> LoadResponse:
    outcome = await gateway.registry.load_sentence_transformer(body.model_name, body.model_path)
    model: ServedModel = outcome.model
    if outcome.already_loaded:
        status, message = "already_loaded", f"Model {model.name} is already loaded."
    else:
        status, message = "loaded", f"Model {model.name} loaded."
    return LoadResponse(
        model_name=model.name,
        status=status,
        converted=outcome.converted,
        embedding_dim=model.metadata.embedding_dim,
        max_seq_length=model.metadata.max_seq_length,
        message=message,
    )


@router.post("/unload_model", response_model=MessageResponse, responses=ERRORS)
async def unload_model(body: ModelRequest, gateway: Gateway = Depends(get_gateway)) -> MessageResponse:
    await gateway.registry.unload(body.model_name)
    return MessageResponse(message=f"Model {body.model_name} unloaded.")


@router.post("/delete_model", response_model=MessageResponse, responses=ERRORS)
async def delete_model(body: ModelRequest, gateway: Gateway = Depends(get_gateway)) -> MessageResponse:
    await gateway.registry.delete(body.model_name)
    return MessageResponse(message=f"Model {body.model_name} deleted.")


@router.get("/loaded_models", response_model=ModelList)
async def loaded_models(gateway: Gateway = Depends(get_gateway)) -> ModelList:
    return ModelList(models=[_info(m.metadata, True) for m in gateway.registry.loaded()])


@router.get("/repository_models", response_model=ModelList)
async def repository_models(gateway: Gateway = Depends(get_gateway)) -> ModelList:
    loaded = {m.triton_name for m in gateway.registry.loaded()}
    return ModelList(
        models=[_info(md, md.triton_name in loaded) for md in gateway.registry.on_disk()]
    )
