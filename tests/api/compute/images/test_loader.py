"""ImageLoader: data URIs, uploads and URLs into one batch; the first bad image is named."""

import base64
import io

import numpy as np
import pytest
from PIL import Image

from embedgate.api.compute.images.loader import ImageLoader, decode_data_uri
from embedgate.api.endpoints.statuses import status_of
from embedgate.api.errors import InvalidImage
from embedgate.api.settings import Settings
from embedgate.contract.kinds.clip import ImagePreprocessing
from embedgate.contract.preprocess.images import ImageRejected

SPEC = ImagePreprocessing(height=16, width=16, mean=(0.5,) * 3, std=(0.5,) * 3)


def png(color) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (20, 30), color).save(buffer, format="PNG")
    return buffer.getvalue()


def data_uri(data: bytes, kind: str = "png") -> str:
    return f"data:image/{kind};base64," + base64.b64encode(data).decode()


@pytest.fixture
async def loader():
    loader = ImageLoader(Settings(image_max_bytes=4096))
    yield loader
    await loader.close()


async def test_data_uris_and_uploads_make_one_batch_in_order(loader):
    batch = await loader.load([data_uri(png((255, 0, 0))), png((0, 255, 0)), data_uri(png((0, 0, 255)), "x-png")], SPEC)
    assert batch.shape == (3, 16, 16, 3) and batch.dtype == np.uint8
    assert [tuple(batch[i, 0, 0]) for i in range(3)] == [(255, 0, 0), (0, 255, 0), (0, 0, 255)]


@pytest.mark.parametrize(
    "source, code, message",
    [
        ("data:text/plain;base64,aGVsbG8=", "invalid_image", "data:image/"),
        ("data:image/png,raw-not-base64", "invalid_image", "data:image/"),
        ("data:image/png;base64,***", "invalid_image", "base64"),
        (data_uri(b"x" * 5000), "image_too_large", "4096"),
        (b"x" * 5000, "image_too_large", "4096"),
        ("ftp://example.com/x.png", "image_url_refused", "http(s)"),
        ("/etc/passwd", "image_url_refused", "http(s)"),
        ("http://127.0.0.1/x.png", "image_url_refused", "loopback"),
    ],
)
async def test_the_bad_image_is_named_by_its_index(loader, source, code, message):
    with pytest.raises(InvalidImage) as caught:
        await loader.load([png((1, 2, 3)), source], SPEC)
    assert caught.value.code == code and status_of(caught.value) == 400
    assert caught.value.message.startswith("image 1: ") and message in caught.value.message


def test_data_uri_size_is_checked_before_decoding():
    with pytest.raises(ImageRejected) as caught:
        decode_data_uri("data:image/png;base64," + "A" * 4_000_000, 1000)
    assert caught.value.code == "image_too_large"
