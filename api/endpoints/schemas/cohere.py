"""Bodies of Cohere's v2 API (``POST /v2/embed``, ``POST /v2/rerank``), as Cohere's API and its
Python client (``cohere.ClientV2``) define them: texts, images or inputs of content parts in,
embeddings by type out; a query and documents in, each document's score out, best first."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from . import patterns
from .fields import FROM_SETTINGS, Body, Count, integral, name_of
from .rerank import MAX_DOCUMENT_CHARS

# Cohere's priority: an integer the schema calls one (7 or 7.0), 0 the highest.
Priority = Annotated[int, Field(ge=0), BeforeValidator(integral)]
EmbedInputType = Literal["search_document", "search_query", "classification", "clustering", "image"]
EmbeddingType = Literal["float", "int8", "uint8", "binary", "ubinary", "base64"]
CohereModel = name_of(
    patterns.OPENAI_MODEL,
    "A loaded model, or a CLIP model as '<model_name>:<pretrained>' (as /v1/models lists it).",
    "sentence-transformers/all-MiniLM-L6-v2",
)
# JSON schema: exactly one of texts, images and inputs is a non-empty list.
_ONE_OF_THEM = {
    "oneOf": [
        {"required": [name], "properties": {name: {"type": "array", "minItems": 1}}}
        for name in ("texts", "images", "inputs")
    ]
}


def _listed(limit: str | None, **schema) -> dict:
    """A list's JSON schema extras: at most the ``limit`` setting's number of items."""
    return {**schema, FROM_SETTINGS: {"maxItems": limit}} if limit else schema


class ImageUrl(Body):
    url: str = Field(
        min_length=1, description="An http(s) URL, or a data:image/...;base64 URI.", examples=["https://example.com/cat.jpg"]
    )


class TextPart(Body):
    type: Literal["text"]
    text: str


class ImagePart(Body):
    type: Literal["image_url"]
    image_url: ImageUrl


class EmbedInput(Body):
    # The schema says what every model served here takes, one part; more is refused (400)
    # saying why: each embeds a text or an image alone.
    content: list[Annotated[TextPart | ImagePart, Field(discriminator="type")]] = Field(
        min_length=1,
        description="The input's part: a text, or an image (the models served here embed each alone).",
        json_schema_extra={"maxItems": 1},
    )


class CohereEmbedRequest(Body):
    model_config = ConfigDict(json_schema_extra=_ONE_OF_THEM)

    model: CohereModel  # type: ignore[valid-type]
    input_type: EmbedInputType = Field(
        description="What the inputs are: 'search_query' and 'search_document' give texts the model's query or "
        "document prompt (and route); 'classification' and 'clustering' the model's prompt of that name where it "
        "has one; 'image' none. Images take no prompt."
    )
    # An empty list is refused (422) as the schema says, not read as absent.
    texts: list[str] | None = Field(
        None, min_length=1, description="Texts to embed.", json_schema_extra=_listed("max_texts_per_request")
    )
    images: list[str] | None = Field(
        None,
        min_length=1,
        description="Images to embed (CLIP and multimodal models): data:image/...;base64 URIs, or http(s) URLs.",
        json_schema_extra=_listed("max_images_per_request"),
    )
    inputs: list[EmbedInput] | None = Field(
        None,
        min_length=1,
        description="Inputs of content parts: a text or an image each (images among them: at most "
        "max_images_per_request, 413 past it).",
        json_schema_extra=_listed("max_texts_per_request"),
    )
    max_tokens: Count | None = Field(
        None,
        description="The most tokens an input keeps: at least the model's max_seq_length (a text is cut at that, "
        "as sentence-transformers cuts it); a smaller value is refused.",
    )
    output_dimension: Count | None = Field(
        None, description="Keep the first N dimensions, then scale back to unit length (at most the model's own)."
    )
    embedding_types: list[EmbeddingType] | None = Field(
        None,
        min_length=1,
        description="The types to return (default ['float']): 'int8'/'uint8' on ranges calibrated once per model "
        "(texts only), 'binary'/'ubinary' packed eight dimensions to a value, 'base64' the float32 bytes.",
    )
    # Cohere's START is read, and refused (400) saying why; the schema lists what is served.
    truncate: Annotated[
        Literal["NONE", "START", "END"], WithJsonSchema({"type": "string", "enum": ["NONE", "END"]})
    ] = Field(
        "END",
        description="'END' cuts a text past the model's max length at its end, as the model's tokenizer does; "
        "'NONE' refuses it (400). Cohere's 'START' is not served: the gateway cuts ends only.",
    )
    priority: Priority | None = Field(None, description="Accepted; every request is scheduled alike.")


class CohereEmbeddings(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    float_: list[list[float]] | None = Field(None, alias="float")
    int8: list[list[int]] | None = None
    uint8: list[list[int]] | None = None
    binary: list[list[int]] | None = None
    ubinary: list[list[int]] | None = None
    base64: list[str] | None = None


class ApiVersion(BaseModel):
    version: str


class BilledUnits(BaseModel):
    input_tokens: int | None = None
    images: int | None = None
    search_units: int | None = None


class CohereMeta(BaseModel):
    api_version: ApiVersion
    billed_units: BilledUnits


class CohereEmbedResponse(BaseModel):
    id: str
    response_type: Literal["embeddings_by_type"] = "embeddings_by_type"
    embeddings: CohereEmbeddings = Field(description="Each type asked for: a row per input, in the inputs' order.")
    texts: list[str] = Field(description="The texts embedded (the text inputs), in order.")
    meta: CohereMeta


class CohereRerankRequest(Body):
    model: name_of(  # type: ignore[valid-type]
        patterns.OPENAI_MODEL,
        "A loaded cross-encoder (one label), or a multi-vector model (scored by MaxSim).",
        "cross-encoder/ms-marco-MiniLM-L6-v2",
    )
    query: str = Field(max_length=MAX_DOCUMENT_CHARS, examples=["What is the capital of France?"])
    documents: list[Annotated[str, Field(max_length=MAX_DOCUMENT_CHARS)]] = Field(
        description="The documents to score against the query.",
        json_schema_extra=_listed("max_texts_per_request", minItems=1),
    )
    top_n: Count | None = Field(None, description="Return only the top_n best documents (all when absent).")
    max_tokens_per_doc: Count | None = Field(
        None, description="At least the model's max_seq_length (a pair is cut at that); a smaller value is refused."
    )
    priority: Priority | None = Field(None, description="Accepted; every request is scheduled alike.")


class CohereRerankResult(BaseModel):
    index: int
    relevance_score: float


class CohereRerankResponse(BaseModel):
    id: str
    results: list[CohereRerankResult]
    meta: CohereMeta
