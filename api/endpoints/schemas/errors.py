"""The project's error shape, ``{"error": {"status", "code", "message"}}``: every route's
but OpenAI's (``openai.py``) and TEI's (``tei.py``)."""

from __future__ import annotations

from pydantic import BaseModel


class ErrorDetail(BaseModel):
    status: int
    code: str
    message: str


class ErrorResponse(BaseModel):
    error: ErrorDetail
