"""POST /infer (text, and images for CLIP and multimodal models) and POST /infer_image (uploaded images),
in the seed's shape, answered by their endpoints (``endpoints/embed.py``)."""

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, File, Form, Request, Response, UploadFile

from ...endpoints.embed import Uploads
from ...endpoints.schemas import patterns
from ...endpoints.schemas.fields import FROM_SETTINGS, name_of
from ...endpoints.schemas.native import InferRequest, InferResponse
from ...endpoints.timing import documented_headers
from ...gateway import Gateway
from ..openapi import errors
from ..responses import BINARY_CONTENT, answered
from ..routing import BodyRoute
from . import TAKES_A_DEADLINE, endpoint_route, get_gateway, request_timeout

router = APIRouter(tags=["inference"], route_class=BodyRoute)

# The answer is built by hand (orjson straight from the arrays, no pydantic on the way out):
# response_model documents it and FastAPI does not re-validate a returned Response.
ANSWERS = {
    200: {"headers": documented_headers(text_always=False), "content": BINARY_CONTENT},
    **errors(400, 404, 406, 409, 413, 415, 422, 429, 500, 502, 503, 504),
}


endpoint_route(
    router, "/infer", InferRequest, lambda endpoints: endpoints.infer, name="infer",
    response_model=InferResponse, responses=ANSWERS,
)


@router.post("/infer_image", response_model=InferResponse, responses=ANSWERS, openapi_extra=TAKES_A_DEADLINE)
async def infer_image(
    http: Request,
    model_name: name_of(  # type: ignore[valid-type]
        patterns.MODEL_NAME, "A multimodal model, or a CLIP model's OpenCLIP architecture (with pretrained).",
        "ViT-B-32", Form,
    ),
    image: Annotated[
        list[UploadFile],
        File(
            description="One or more image files.",
            json_schema_extra={"minItems": 1, FROM_SETTINGS: {"maxItems": "max_images_per_request"}},
        ),
    ],
    pretrained: Annotated[
        str | None,
        Form(
            min_length=1,
            max_length=4096,
            description="A CLIP model's pretrained (not for a multimodal sentence-transformer).",
            examples=["laion2b_s34b_b79k"],
            json_schema_extra={"pattern": patterns.PRETRAINED},
        ),
    ] = None,
    normalize: Annotated[bool, Form()] = True,
    precision: Annotated[Literal["float32", "binary", "ubinary"], Form()] = "float32",
    gateway: Gateway = Depends(get_gateway),
    timeout_s: float = Depends(request_timeout),
) -> Response:
    """Images uploaded as multipart/form-data files, through a CLIP model's image tower or a
    multimodal model's image graph."""
    files = [await upload.read() for upload in image]
    answer = await gateway.endpoints.infer_uploads(Uploads(model_name, pretrained, files, normalize, precision), timeout_s)
    return answered(answer, http.headers.get("accept"))
