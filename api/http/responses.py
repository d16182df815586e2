"""Answers as clients take them: JSON serialized with orjson (numpy arrays included, no float
round-trip), or, where the answer is one array and the client asks for it by ``Accept``,
the array itself: ``application/x-npy`` (NumPy's .npy file: dtype and shape inside) or
``application/octet-stream`` (its little-endian bytes, row after row, the dtype and shape
in ``x-embedding-dtype`` and ``x-embedding-shape``). Answers that are never one array
(OpenAI's, scores, sparse and multi-vector embeddings) are JSON whatever the client
accepts. A 1,024-dimension float32 vector is
about 20 KB of JSON and 4 KB of bytes."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
from starlette.responses import JSONResponse as _StarletteJSONResponse
from starlette.responses import Response

from ..endpoints.envelope import Answer
from ..errors import NotAcceptable

JSON = "application/json"
NPY = "application/x-npy"
OCTETS = "application/octet-stream"
BINARY = (NPY, OCTETS)
# What a client may name that a JSON answer satisfies.
_JSON_TOO = {JSON, "application/*", "*/*"}


class JSONResponse(_StarletteJSONResponse):
    # A JSONResponse subclass, not a bare Response: FastAPI documents a route's response
    # model only when the route's response class is one.
    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)


def wanted(accept: str | None) -> str:
    """The form a client's ``Accept`` asks for: the first of JSON or a binary form it names,
    by quality then order (JSON where it names none of them, or names none at all)."""
    if not accept:
        return JSON
    named = []
    for position, part in enumerate(accept.split(",")):
        media, _, parameters = part.partition(";")
        quality = 1.0
        for parameter in parameters.split(";"):
            key, _, value = parameter.partition("=")
            if key.strip() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        media = media.strip().lower()
        if quality > 0 and (media in _JSON_TOO or media in BINARY):
            named.append((-quality, position, JSON if media in _JSON_TOO else media))
    return min(named)[2] if named else JSON


def answered(answer: Answer, accept: str | None) -> Response:
    """The endpoint's answer in the form the client asks for."""
    form = wanted(accept) if answer.binary else JSON
    if form == JSON or (answer.array is None and _takes_json(accept)):
        return JSONResponse(answer.body, headers=answer.headers)
    if answer.array is None:
        raise NotAcceptable(f"this answer is JSON ({JSON}): it is not one array that {form} could carry")
    array = answer.array
    little = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    if form == NPY:
        return Response(npy_bytes(little), media_type=NPY, headers=answer.headers)
    headers = {
        **answer.headers,
        "x-embedding-dtype": str(array.dtype),
        "x-embedding-shape": ",".join(str(size) for size in array.shape),
    }
    return Response(little.tobytes(), media_type=OCTETS, headers=headers)


def npy_bytes(array: np.ndarray) -> bytes:
    """A C-ordered array as a .npy file (format 1.0), as ``np.save`` writes it, without its
    per-call cost (``np.save`` spends about 30 µs building the header)."""
    shape = "(" + "".join(f"{size}, " for size in array.shape).removesuffix(", ")
    shape += ",)" if len(array.shape) == 1 else ")"
    header = f"{{'descr': '{array.dtype.str}', 'fortran_order': False, 'shape': {shape}, }}"
    # The magic, the version, the header's length; the header padded so that the data
    # starts on a 64-byte boundary, ending with a newline.
    padded = header + " " * (63 - (10 + len(header)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(padded).to_bytes(2, "little") + padded.encode("latin1") + array.tobytes()


def _takes_json(accept: str | None) -> bool:
    return not accept or any(part.partition(";")[0].strip().lower() in _JSON_TOO for part in accept.split(","))


# The binary forms, as the OpenAPI document lists them beside JSON (the routes whose answer
# may be one array).
BINARY_CONTENT = {
    NPY: {"schema": {"type": "string", "format": "binary",
                     "description": "The embeddings as a NumPy .npy file (Accept: application/x-npy)."}},
    OCTETS: {"schema": {"type": "string", "format": "binary",
                        "description": "The embeddings' little-endian bytes, row after row; dtype and shape in "
                        "x-embedding-dtype and x-embedding-shape (Accept: application/octet-stream)."}},
}
