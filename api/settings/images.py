"""CLIP models and their images: extra OpenCLIP configs, and the limits on images (count,
bytes, pixels), how they are fetched (deadlines, redirects, the hosts allowed) and the
threads that decode them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, Field
from pydantic_settings import NoDecode


class ImageSettings(BaseModel):
    clip_model_config_dir: Path | None = Field(
        None,
        description="Directory of extra OpenCLIP model configs (<model_name>.json) that "
        "/load_clip_model can name besides OpenCLIP's own architectures.",
    )
    max_images_per_request: int = Field(64, ge=1, description="Images in one request before 413.")
    image_max_bytes: int = Field(
        10 * 1024 * 1024, ge=1024, description="Largest image accepted, in bytes (fetched, data URI or upload)."
    )
    image_max_pixels: int = Field(
        40_000_000, ge=1, description="Largest image accepted, in pixels, checked before decoding."
    )
    image_fetch_timeout_s: float = Field(
        10.0, gt=0, description="Deadline for fetching one image URL, redirects included."
    )
    image_connect_timeout_s: float = Field(3.0, gt=0, description="Deadline for connecting to an image host.")
    image_max_redirects: int = Field(3, ge=0, description="Redirects followed when fetching an image.")
    image_fetch_allow: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated hosts or networks (CIDR) image URLs may reach although they "
        "are not public (loopback, private...). Empty: public addresses only.",
    )
    image_threads: int = Field(2, ge=1, description="Threads that decode and resize images off the event loop.")
