"""POST /infer (text, and images for CLIP and multimodal models) and POST /infer_image (uploaded images),
in the seed's shape, answered by their endpoints (``endpoints/embed.py``)."""

from typing import Annotated, Literal

from fastapi import Depends, File, Form, Request, Response, UploadFile
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from ...endpoints.embed import Uploads
from ...endpoints.schemas import patterns
from ...endpoints.schemas.fields import FROM_SETTINGS, PRETRAINED_MEANS_CLIP, Pretrained, name_of
from ...endpoints.schemas.native import InferRequest, InferResponse
from ...endpoints.timing import documented_headers
from ...gateway import Gateway
from ..openapi import errors
from ..responses import BINARY_CONTENT, answered
from ..route_table import EndpointRoute, EndpointRouter
from . import TAKES_A_DEADLINE, get_gateway, request_timeout

router = EndpointRouter(tags=["inference"])

# The answer is built by hand (orjson straight from the arrays, no pydantic on the way out):
# response_model documents it and FastAPI does not re-validate a returned Response.
ANSWERS = {
    200: {"headers": documented_headers(text_always=False), "content": BINARY_CONTENT},
    **errors(400, 404, 406, 409, 413, 415, 422, 429, 500, 502, 503, 504),
}


router.endpoint_route(EndpointRoute("/infer", "infer", InferRequest, "infer", InferResponse, ANSWERS))


class ImageUploads(BaseModel):
    """The form of POST /infer_image. With a pretrained the model is a CLIP model, its
    model_name an OpenCLIP architecture (as on /infer); without, a multimodal
    sentence-transformer named alone."""

    model_config = ConfigDict(json_schema_extra=PRETRAINED_MEANS_CLIP)

    model_name: name_of(  # type: ignore[valid-type]
        patterns.MODEL_NAME, "A multimodal model, or a CLIP model's OpenCLIP architecture (with pretrained).",
        "ViT-B-32",
    )
    image: list[UploadFile] = File(
        description="One or more image files.",
        json_schema_extra={"minItems": 1, FROM_SETTINGS: {"maxItems": "max_images_per_request"}},
    )
    # A form has no null (a client sending one sends the text "null"): left out is the only
    # "none", so the schema lists a string alone.
    pretrained: Pretrained | SkipJsonSchema[None] = Field(
        None, description="A CLIP model's pretrained (not for a multimodal sentence-transformer)."
    )
    normalize: bool = True
    precision: Literal["float32", "binary", "ubinary"] = "float32"


@router.post("/infer_image", response_model=InferResponse, responses=ANSWERS, openapi_extra=TAKES_A_DEADLINE)
async def infer_image(
    http: Request,
    form: Annotated[ImageUploads, Form(media_type="multipart/form-data")],
    gateway: Gateway = Depends(get_gateway),
    timeout_s: float = Depends(request_timeout),
) -> Response:
    """Images uploaded as multipart/form-data files, through a CLIP model's image tower or a
    multimodal model's image graph."""
    files = [await upload.read() for upload in form.image]
    uploads = Uploads(form.model_name, form.pretrained, files, form.normalize, form.precision)
    answer = await gateway.endpoints.infer_uploads(uploads, timeout_s)
    return answered(answer, http.headers.get("accept"))
