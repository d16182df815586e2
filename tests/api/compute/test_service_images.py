"""Images through a multimodal model's image route: a batch job's lines (the bulk path) with
texts and images among them, each line's answer in its own inputs' order."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from embedgate.api.compute.backend.triton import TritonBackend
from embedgate.api.compute.requests.asks import Ask, ImageInput, Options, Output
from embedgate.api.compute.requests.routes import EVERY_TASK, Route
from embedgate.api.compute.requests.steps import ImageGraph
from embedgate.api.compute.service import EmbeddingService
from embedgate.api.errors import InvalidImage
from embedgate.api.models.registry import ServedModel
from embedgate.api.settings import Settings
from embedgate.contract.preprocess.text import TextTokenizer
from tests.api.compute.requests.kinds.test_multimodal import IMAGES, metadata


class Client:
    """Texts: [their real tokens, 0, 0]; images: [0, their mean pixel, 1]."""

    def __init__(self):
        self.calls = []

    async def infer(self, triton_name, tensors, output, *, timeout_s, version=""):
        self.calls.append(triton_name)
        if "pixels" in tensors:
            pixels = tensors["pixels"].astype(np.float32)
            return np.stack([np.zeros(len(pixels)), pixels.mean(axis=(1, 2, 3)), np.ones(len(pixels))], 1).astype(np.float32)
        counts = tensors["attention_mask"].sum(1)
        return np.stack([counts, np.zeros_like(counts), np.zeros_like(counts)], 1).astype(np.float32)


def data_uri(level: int) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (40, 30), (level, level, level)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


@pytest.fixture
def served(minilm_path):
    client = Client()
    service = EmbeddingService(Settings(), TritonBackend(client))
    tokenizer = TextTokenizer(Path(minilm_path) / "tokenizer.json", 256)
    routes = [Route("", EVERY_TASK, tokenizer, "org--mm"), Route("images", EVERY_TASK, None, "org--mm---image", step=ImageGraph(IMAGES))]
    model = ServedModel("org/mm", "org--mm", metadata(normalized=True), tokenizer, routes=routes)
    yield service, model, client
    service.close()


async def test_a_batch_jobs_lines_of_texts_and_images_come_back_in_their_order(served):
    service, model, client = served
    lines = [
        Ask(Output.EMBED, ["one two three", ImageInput(data_uri(200)), "four"], options=Options(normalize=False)),
        Ask(Output.EMBED, [ImageInput(data_uri(50))], options=Options(normalize=False)),
        Ask(Output.EMBED, ["five", ImageInput("data:image/png;base64,AAAA")], options=Options(normalize=False)),
    ]
    first, second, third = await service.answer_bulk(model, lines)
    assert first.vectors[:, 0].tolist() == [5, 0, 3] and first.vectors[1, 1] == pytest.approx(200)
    assert first.token_counts == [5, 0, 3]
    assert second.vectors[0, 1] == pytest.approx(50)
    # A line with an image that cannot be used is that line's error; the others are answered.
    assert isinstance(third, InvalidImage) and third.code == "invalid_image" and third.message.startswith("image 0: ")
    # The texts of every line in one call; each line's images in a call of their own.
    assert client.calls.count("org--mm") == 1 and client.calls.count("org--mm---image") == 2
