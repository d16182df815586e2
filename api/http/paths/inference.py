"""POST /infer (text, and images for CLIP models) and POST /infer_image (uploaded images),
in the seed's shape. Texts get what the model's kind gives for them (its ``text_output``):
dense, sparse or multi-vector embeddings, each under its own key."""

import time
from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, File, Form, UploadFile

from ...compute.requests.asks import Ask, Options, Output
from ...compute.requests.prompts import PromptChoice
from ...compute.requests.results import Embeddings, ImageEmbeddings
from ...compute.scheduling.concurrency import run_all
from ...errors import InvalidInput, TooManyInputs
from ...gateway import Gateway
from .. import patterns
from ..openai.rate_limits import rate_limit_headers
from ..openapi import errors
from ..responses import JSONResponse
from ..routing import BodyRoute
from ..schemas import FROM_SETTINGS, InferRequest, InferResponse
from ..timing import IMAGE_INFERENCE_HEADER, IMAGE_LOAD_HEADER, TOTAL_HEADER, documented_headers, inference_headers
from . import TAKES_A_DEADLINE, get_gateway, request_timeout, serving

router = APIRouter(tags=["inference"], route_class=BodyRoute)

# The answer is built by hand (orjson straight from the arrays, no pydantic on the way out):
# response_model documents it and FastAPI does not re-validate a returned Response.
ANSWERS = {
    200: {"headers": documented_headers(text_always=False)},
    **errors(400, 404, 409, 413, 415, 422, 429, 500, 502, 503, 504),
}


@router.post("/infer", response_model=InferResponse, responses=ANSWERS, openapi_extra=TAKES_A_DEADLINE)
async def infer(
    body: InferRequest,
    gateway: Gateway = Depends(get_gateway),
    timeout_s: float = Depends(request_timeout),
) -> JSONResponse:
    started = time.perf_counter()
    if not body.text and not body.image:
        raise InvalidInput("text must be a string or a non-empty list of strings (or, for a CLIP model, give image)")
    if body.prompt_name is not None and body.prompt is not None:
        raise InvalidInput("give prompt_name or prompt, not both")
    settings = gateway.settings
    _check_count(body.text, settings.max_texts_per_request, "texts")
    _check_count(body.image, settings.max_images_per_request, "images")
    model = serving(gateway, body.model_name, body.pretrained)
    service = gateway.embeddings
    output = model.kind.text_output
    if body.text and output is None:
        model.kind.require(Output.EMBED, model.name)  # refused, saying where to go instead
    standing = service.charge(body.text or (), len(body.image or ()))
    # One slot of the model's in-flight limit for the whole request, both parts included.
    with service.admit(model):
        # A CLIP model's text and image parts run at the same time.
        calls = {}
        if body.text:
            prompt = PromptChoice(prompt_name=body.prompt_name, prompt=body.prompt, task=body.task)
            options = Options(
                normalize=body.normalize,
                normalize_given="normalize" in body.model_fields_set,
                precision=body.precision,
                top_k=body.top_k,
            )
            calls["text"] = service.answer(model, Ask(output, body.text, prompt, options), timeout_s=timeout_s)
        if body.image:
            calls["image"] = service.embed_images(
                model, body.image, normalize=body.normalize, timeout_s=timeout_s, precision=body.precision
            )
        results = dict(zip(calls, await run_all(list(calls.values()))))
    return _answer(
        model.name, started, output, results.get("text"), results.get("image"), rate_limit_headers(standing)
    )


# Each text output's key in the answer, and its rows as JSON values.
ANSWER_KEYS: dict[Output, tuple[str, Callable[[Embeddings], Any]]] = {
    Output.EMBED: ("text_embeddings", lambda text: text.vectors),
    Output.SPARSE: (
        "sparse_embeddings",
        lambda text: [{"indices": row.indices, "values": row.values} for row in text.sparse or ()],
    ),
    Output.MULTI_VECTOR: ("multi_vector_embeddings", lambda text: list(text.vectors)),
}


@router.post("/infer_image", response_model=InferResponse, responses=ANSWERS, openapi_extra=TAKES_A_DEADLINE)
async def infer_image(
    model_name: Annotated[
        str,
        Form(
            min_length=1,
            max_length=200,
            description="OpenCLIP architecture.",
            examples=["ViT-B-32"],
            json_schema_extra={"pattern": patterns.CLIP_ARCHITECTURE},
        ),
    ],
    pretrained: Annotated[
        str,
        Form(
            min_length=1,
            max_length=4096,
            examples=["laion2b_s34b_b79k"],
            json_schema_extra={"pattern": patterns.PRETRAINED},
        ),
    ],
    image: Annotated[
        list[UploadFile],
        File(
            description="One or more image files.",
            json_schema_extra={"minItems": 1, FROM_SETTINGS: {"maxItems": "max_images_per_request"}},
        ),
    ],
    normalize: Annotated[bool, Form()] = True,
    precision: Annotated[Literal["float32", "binary", "ubinary"], Form()] = "float32",
    gateway: Gateway = Depends(get_gateway),
    timeout_s: float = Depends(request_timeout),
) -> JSONResponse:
    """Images uploaded as multipart/form-data files, through a CLIP model's image tower."""
    started = time.perf_counter()
    _check_count(image, gateway.settings.max_images_per_request, "images")
    model = serving(gateway, model_name, pretrained)
    standing = gateway.embeddings.charge(images=len(image))
    files = [await upload.read() for upload in image]
    result = await gateway.embeddings.embed_images(
        model, files, normalize=normalize, timeout_s=timeout_s, precision=precision
    )
    return _answer(model.name, started, None, None, result, rate_limit_headers(standing))


def _check_count(items: list | None, limit: int, what: str) -> None:
    if items is not None and len(items) > limit:
        raise TooManyInputs(f"{len(items)} {what} in one request; the limit is {limit}")


def _answer(
    model: str,
    started: float,
    output: Output | None,
    text: Embeddings | None,
    image: ImageEmbeddings | None,
    limits: dict[str, str],
) -> JSONResponse:
    total_ms = (time.perf_counter() - started) * 1000
    body: dict = {}
    headers = inference_headers(model, text, total_ms) if text else {TOTAL_HEADER: f"{total_ms:.2f}"}
    headers.update(limits)
    if text and output is not None:
        key, rows = ANSWER_KEYS[output]
        body[key] = rows(text)
    if image:
        body["image_embeddings"] = image.vectors
        headers[IMAGE_LOAD_HEADER] = f"{image.load_ms:.2f}"
        headers[IMAGE_INFERENCE_HEADER] = f"{image.inference_ms:.2f}"
    body["processingTimeMs"] = round(total_ms, 3)
    return JSONResponse(body, headers=headers)
