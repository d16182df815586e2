"""The images of one request (URLs, data URIs or uploaded bytes) in, one uint8 batch out.

URLs are fetched concurrently by the guarded fetcher; decoding and resizing run in the
image threads, never on the event loop. The first image that cannot be used fails the
request with a 400 naming it (``image 2: ...``) and cancels the work on the others.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from embedgate.contract.kinds.vision_language import PatchImages
from embedgate.contract.preprocess.images import (
    AnyImagePreparation,
    ImageRejected,
    Patches,
    prepare_image,
    prepare_patched_image,
)

from ...errors import InvalidImage
from ...settings import Settings
from ...telemetry.metrics import count_image_fetch_failure
from ..scheduling.concurrency import run_all
from ..scheduling.threads import OffLoopThreads
from .addresses import AddressPolicy
from .fetch import ImageFetcher

_DATA_URI = re.compile(r"data:image/[A-Za-z0-9.+-]+;base64", re.ASCII)


def decode_data_uri(uri: str, max_bytes: int) -> bytes:
    header, _, payload = uri.partition(",")
    if not _DATA_URI.fullmatch(header):
        raise ImageRejected("invalid_image", "a data URI must be data:image/<type>;base64,<data>")
    if len(payload) // 4 * 3 > max_bytes + 2:
        raise ImageRejected("image_too_large", f"the image is more than the limit of {max_bytes} bytes")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ImageRejected("invalid_image", "the data URI is not valid base64") from None
    if len(data) > max_bytes:
        raise ImageRejected("image_too_large", f"the image is more than the limit of {max_bytes} bytes")
    return data


class ImageLoader:
    def __init__(self, settings: Settings):
        self.max_bytes = settings.image_max_bytes
        self.max_pixels = settings.image_max_pixels
        self.fetcher = ImageFetcher(
            AddressPolicy(settings.image_fetch_allow),
            max_bytes=settings.image_max_bytes,
            timeout_s=settings.image_fetch_timeout_s,
            connect_timeout_s=settings.image_connect_timeout_s,
            max_redirects=settings.image_max_redirects,
        )
        self._pool = OffLoopThreads(settings.image_threads, "images")

    async def close(self) -> None:
        self._pool.shutdown()
        await self.fetcher.close()

    async def load(self, sources: Sequence[str | bytes], preprocessing: AnyImagePreparation) -> np.ndarray:
        """uint8 ``[len(sources), height, width, 3]``; raises InvalidImage (400)."""
        return np.stack(await self._all(sources, prepare_image, preprocessing))

    async def load_patches(self, sources: Sequence[str | bytes], spec: PatchImages) -> list[Patches]:
        """Each image's patches and grid, for a vision-language model; raises InvalidImage (400)."""
        return await self._all(sources, prepare_patched_image, spec)

    async def _all(self, sources: Sequence[str | bytes], prepare: Callable, spec: Any) -> list:
        return await run_all([self._one(index, source, prepare, spec) for index, source in enumerate(sources)])

    async def _one(self, index: int, source: str | bytes, prepare: Callable, spec: Any) -> Any:
        try:
            if isinstance(source, str) and source.partition(":")[0].lower() in ("http", "https"):
                source = await self.fetcher.fetch(source)
            return await self._pool.run(self._prepare, source, prepare, spec)
        except ImageRejected as rejected:
            count_image_fetch_failure(rejected.code)
            raise InvalidImage(rejected.code, f"image {index}: {rejected.reason}") from None

    def _prepare(self, source: str | bytes, prepare: Callable, spec: Any) -> Any:
        """In an image thread: a data URI or fetched/uploaded bytes -> pixels (or patches)."""
        if isinstance(source, str):
            if source.partition(":")[0].lower() != "data":
                raise ImageRejected(
                    "image_url_refused", "an image must be an http(s) URL or a data:image/...;base64 URI"
                )
            source = decode_data_uri(source, self.max_bytes)
        elif len(source) > self.max_bytes:
            raise ImageRejected("image_too_large", f"the image is more than the limit of {self.max_bytes} bytes")
        return prepare(source, spec, max_pixels=self.max_pixels)
