"""The CLIP routes with fake parts: request shapes, limits, and text and images run together."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from embedgate.api.compute.requests.kinds import kind_of
from embedgate.api.compute.requests.results import Embeddings

from .test_inference import assert_error

MODEL = {"model_name": "org/loaded", "pretrained": "tag"}


@pytest.fixture
def image_calls(gateway):
    return gateway.embeddings.image_calls


@pytest.fixture
def lookups(gateway):
    seen = []
    served = gateway.registry.served

    def record(name, pretrained=None):
        seen.append((name, pretrained))
        return served(name)

    gateway.registry.served = record
    return seen


def test_text_and_images_answer_in_the_seed_shape(client, gateway, image_calls, lookups):
    response = client.post("/infer", json={**MODEL, "text": ["a", "b"], "image": ["https://example.com/x.png"]})
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"text_embeddings", "image_embeddings", "processingTimeMs"}
    assert len(body["text_embeddings"]) == 2 and body["image_embeddings"] == [[1.0, 1.0, 1.0]]
    assert image_calls == [("org/loaded", ["https://example.com/x.png"], True)]
    assert lookups == [("org/loaded", "tag")]
    assert response.headers["x-image-load-time-ms"] == "1.00"


def test_images_only_and_a_single_image_string(client, image_calls):
    response = client.post("/infer", json={**MODEL, "image": "data:image/png;base64,AAAA", "normalize": False})
    assert set(response.json()) == {"image_embeddings", "processingTimeMs"}
    assert image_calls == [("org/loaded", ["data:image/png;base64,AAAA"], False)]


def test_text_and_image_parts_run_at_the_same_time(client, gateway):
    both_started = asyncio.Event()
    started = []

    async def arrive() -> None:
        started.append(1)
        if len(started) == 2:
            both_started.set()
        # Each part waits for the other to have started: run one after the other, this hangs.
        await asyncio.wait_for(both_started.wait(), timeout=5)

    async def answer(model, ask, plan, *, timeout_s):
        await arrive()
        return await type(gateway.embeddings).answer(gateway.embeddings, model, ask, plan, timeout_s=timeout_s)

    async def embed_images(model, images, *, normalize, timeout_s, precision="float32"):
        await arrive()
        return Embeddings(np.zeros((len(images), 3), dtype=np.float32), [0] * len(images), 0, 0.0, 0.0)

    gateway.embeddings.answer = answer
    gateway.embeddings.embed_images = embed_images
    response = client.post("/infer", json={**MODEL, "text": ["a"], "image": ["https://example.com/x.png"]})
    assert response.status_code == 200, response.text


def test_a_failing_image_part_cancels_the_text_part(client, gateway):
    from embedgate.api.errors import InvalidImage

    cancelled = []
    text_started = asyncio.Event()

    async def answer(model, ask, plan, *, timeout_s):
        text_started.set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def embed_images(model, images, *, normalize, timeout_s, precision="float32"):
        await text_started.wait()  # the text part is at work when the image part fails
        raise InvalidImage("invalid_image", "image 0: not an image")

    gateway.embeddings.answer = answer
    gateway.embeddings.embed_images = embed_images
    response = client.post("/infer", json={**MODEL, "text": ["a"], "image": ["https://example.com/x.png"]})
    assert assert_error(response, 400, "invalid_image") == "image 0: not an image"
    assert cancelled == [True]


def test_too_many_images_is_413(client, settings, image_calls):
    images = ["https://example.com/x.png"] * (settings.max_images_per_request + 1)
    assert "limit is" in assert_error(client.post("/infer", json={**MODEL, "image": images}), 413, "too_many_inputs")
    assert image_calls == []


@pytest.mark.parametrize("body", [{**MODEL, "image": [1]}, {**MODEL, "image": {"url": "x"}}, {**MODEL, "pretrained": ""}])
def test_invalid_image_fields_are_422(client, body):
    assert_error(client.post("/infer", json=body), 422, "invalid_request")


def test_uploads_are_read_and_embedded(client, image_calls, lookups):
    files = [("image", ("a.png", b"first", "image/png")), ("image", ("b.jpg", b"second", "image/jpeg"))]
    response = client.post("/infer_image", data={**MODEL, "normalize": "false"}, files=files)
    assert response.status_code == 200, response.text
    assert set(response.json()) == {"image_embeddings", "processingTimeMs"}
    assert image_calls == [("org/loaded", [b"first", b"second"], False)]
    assert lookups == [("org/loaded", "tag")]


def test_upload_limits_and_missing_fields(client, settings, image_calls):
    files = [("image", (f"{i}.png", b"x", "image/png")) for i in range(settings.max_images_per_request + 1)]
    assert_error(client.post("/infer_image", data=MODEL, files=files), 413, "too_many_inputs")
    no_image = [("other", ("n.txt", b"x", "text/plain"))]
    assert_error(client.post("/infer_image", data=MODEL, files=no_image), 422, "invalid_request")
    one = [("image", ("a.png", b"x", "image/png"))]
    assert_error(client.post("/infer_image", data={"pretrained": "tag"}, files=one), 422, "invalid_request")
    assert image_calls == []


def test_uploads_without_pretrained_name_a_sentence_transformers_model(client, image_calls, lookups):
    # A multimodal sentence-transformer is named alone, as /load_sentence_transformer_model loaded it.
    one = [("image", ("a.png", b"x", "image/png"))]
    response = client.post("/infer_image", data={"model_name": "org/loaded"}, files=one)
    assert response.status_code == 200, response.text
    assert lookups == [("org/loaded", None)]


def test_load_clip_model_passes_the_pair_and_answers_with_the_image_size(client, gateway):
    from dataclasses import dataclass

    from embedgate.contract.kinds.clip import ClipMetadata, ClipText, ImagePreprocessing
    from embedgate.contract.spec import ImageParityResult
    from tests.api.conftest import fake_metadata

    metadata = fake_metadata("ViT-B-32").model_copy(
        update={
            "kind": "clip",
            "record": ClipMetadata(
                pretrained="tag",
                text=ClipText(context_length=77, sot_token_id=1, eot_token_id=2, word_pattern="x"),
                image=ImagePreprocessing(height=224, width=224, mean=(0.5,) * 3, std=(0.5,) * 3),
                image_parity=ImageParityResult(passed=True, threshold=0.9999, min_cosine=1.0, images=1),
            ),
        }
    )

    @dataclass
    class Outcome:
        model: object
        already_loaded: bool = False
        converted: bool = True

    calls = []

    async def load_clip(model_name, pretrained, *, revision=None, on_source_change="convert", progress=None):
        calls.append((model_name, pretrained))
        return Outcome(type("Served", (), {"metadata": metadata, "kind": kind_of(metadata)})())

    gateway.registry.load_clip = load_clip
    response = client.post("/load_clip_model", json={"model_name": "ViT-B-32", "pretrained": "tag"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["status"], body["converted"], body["image_size"], body["pretrained"]) == ("loaded", True, [224, 224], "tag")
    assert calls == [("ViT-B-32", "tag")]
    assert_error(client.post("/load_clip_model", json={"model_name": "ViT-B-32"}), 422, "invalid_request")


def test_unload_passes_pretrained(client, gateway):
    response = client.post("/unload_model", json=MODEL)
    assert response.status_code == 200 and "(tag)" in response.json()["message"]
