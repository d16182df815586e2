"""OpenCLIP end to end: HTTP -> gateway -> real tritonserver, on a small model with random
weights built at test time (and a small SigLIP, whose tokenizer is a Hugging Face one). Images come from a local HTTP server on 127.0.0.2, the one
address the allow-list admits; everything else on loopback stays refused."""

from __future__ import annotations

import base64
import concurrent.futures
import io
import threading

import httpx
import numpy as np
import pytest
from PIL import Image

from tests.clip_model import build_tiny_clip, build_tiny_siglip, reference_model
from tests.helpers import cosine_rows
from tests.image_server import ImageServer

from .conftest import start_gateway, wait_ready, wait_until

MAX_IMAGE_BYTES = 2_000_000
MAX_IMAGE_PIXELS = 4_000_000


def encode(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return buffer.getvalue()


def picture(width: int, height: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 // width, y * 255 // height, (x * y) % 256], axis=-1)
    return Image.fromarray(np.clip(base + rng.integers(0, 60, (height, width, 3)), 0, 255).astype(np.uint8))


def animated_gif() -> bytes:
    frames = [picture(64, 64, seed) for seed in range(3)]
    buffer = io.BytesIO()
    frames[0].save(buffer, format="GIF", save_all=True, append_images=frames[1:], duration=40, loop=0)
    return buffer.getvalue()


IMAGES = {
    "photo.jpg": encode(picture(320, 240, 1), "JPEG", quality=90),
    "portrait.png": encode(picture(90, 200, 2), "PNG"),
    "alpha.png": encode(picture(120, 100, 3).convert("RGBA"), "PNG"),
    "palette.gif": encode(picture(100, 80, 4).convert("P"), "GIF"),
    "cmyk.jpg": encode(picture(150, 150, 5).convert("CMYK"), "JPEG"),
    "animated.gif": animated_gif(),
    "pixel.png": encode(picture(1, 1, 6), "PNG"),
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_clip(tmp_path_factory.mktemp("tiny-clip"))


@pytest.fixture(scope="module")
def reference(tiny):
    return reference_model(tiny)


@pytest.fixture(scope="module")
def images():
    """The server the allow-list admits."""
    server = ImageServer("127.0.0.2")
    for name, data in IMAGES.items():
        server.add(f"/{name}", data, headers={"Content-Type": "image/*"})
    yield server
    server.close()


@pytest.fixture(scope="module")
def forbidden():
    """A server on 127.0.0.1, which nothing admits: reachable, and never to be reached."""
    server = ImageServer("127.0.0.1")
    server.add("/secret.png", IMAGES["photo.jpg"])
    yield server
    server.close()


@pytest.fixture(scope="module")
def settings(tiny):
    return {
        "clip_model_config_dir": str(tiny.config_dir),
        "image_fetch_allow": "127.0.0.2",
        "image_max_bytes": str(MAX_IMAGE_BYTES),
        "image_max_pixels": str(MAX_IMAGE_PIXELS),
        "image_fetch_timeout_s": "30",  # held images (a backlog) wait for the test to release them
        "max_images_per_request": "8",
        "max_batch_size": "4",  # small, so that large requests are split into chunks
        # One process: the backlog test reads one process's admission (each worker admits
        # against its own backlog), and a GPU host would start one worker per core.
        "workers": "1",
    }


@pytest.fixture(scope="module")
def clip_gateway(tmp_path_factory, settings):
    repository = tmp_path_factory.mktemp("clip_repository")
    gateway = start_gateway(repository, tmp_path_factory.mktemp("logs") / "clip-gateway.log", **settings)
    yield gateway
    gateway.stop()


@pytest.fixture
def http(clip_gateway):
    with clip_gateway.client() as client:
        yield client


@pytest.fixture(scope="module")
def model(tiny) -> dict:
    return {"model_name": tiny.model_name, "pretrained": str(tiny.checkpoint)}


@pytest.fixture
def loaded(clip_gateway, model):
    response = httpx.post(f"{clip_gateway.url}/load_clip_model", json=model, timeout=300)
    assert response.status_code == 200, response.text
    return response.json()


def reference_text(reference, texts: list[str]) -> np.ndarray:
    import torch

    clip_model, _, tokenizer = reference
    with torch.no_grad():
        return clip_model.encode_text(tokenizer(texts)).numpy()


def reference_images(reference, blobs: list[bytes]) -> np.ndarray:
    import torch

    clip_model, preprocess, _ = reference
    with torch.no_grad():
        batch = torch.stack([preprocess(Image.open(io.BytesIO(blob))) for blob in blobs])
        return clip_model.encode_image(batch).numpy()


def test_load_converts_once_then_is_a_no_op(http, loaded, model, tiny):
    assert loaded["status"] == "loaded" and loaded["converted"] is True
    assert loaded["model_name"] == tiny.model_name and loaded["pretrained"] == str(tiny.checkpoint)
    assert (loaded["embedding_dim"], loaded["max_seq_length"], loaded["image_size"]) == (32, 24, [48, 64])
    again = http.post("/load_clip_model", json=model)
    assert again.json()["status"] == "already_loaded" and again.json()["converted"] is False


def test_text_embeddings_match_open_clip(http, loaded, model, reference):
    texts = ["a photo of a cat", "a diagram", "a very long caption that goes on " * 10, "Ünïcödé ☃"]
    response = http.post("/infer", json={**model, "text": texts})
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"text_embeddings", "processingTimeMs"}
    served = np.asarray(body["text_embeddings"])
    assert cosine_rows(served, reference_text(reference, texts)).min() >= 0.9999
    np.testing.assert_allclose(np.linalg.norm(served, axis=1), 1.0, atol=1e-5)
    assert response.headers["x-truncated-inputs"] == "1"
    raw = http.post("/infer", json={**model, "text": texts[:1], "normalize": False}).json()["text_embeddings"]
    np.testing.assert_allclose(raw, reference_text(reference, texts[:1]), rtol=1e-3, atol=1e-4)


def test_images_by_url_match_open_clip(http, loaded, model, reference, images):
    names = list(IMAGES)[:5]
    response = http.post("/infer", json={**model, "image": [images.url(f"/{n}") for n in names]})
    assert response.status_code == 200, response.text
    served = np.asarray(response.json()["image_embeddings"])
    assert served.shape == (5, 32)
    assert cosine_rows(served, reference_images(reference, [IMAGES[n] for n in names])).min() >= 0.9999
    assert float(response.headers["x-image-load-time-ms"]) >= 0


def test_edge_images_are_handled_as_open_clip_handles_them(http, loaded, model, reference, images):
    names = ["animated.gif", "pixel.png"]  # first frame; a 1x1 image resized like any other
    response = http.post("/infer", json={**model, "image": [images.url(f"/{n}") for n in names]})
    assert response.status_code == 200, response.text
    served = response.json()["image_embeddings"]
    assert cosine_rows(served, reference_images(reference, [IMAGES[n] for n in names])).min() >= 0.9999


def test_images_by_data_uri_match_open_clip(http, loaded, model, reference):
    blobs = [IMAGES["photo.jpg"], IMAGES["alpha.png"]]
    uris = ["data:image/jpeg;base64," + base64.b64encode(blobs[0]).decode(), "data:image/png;base64," + base64.b64encode(blobs[1]).decode()]
    response = http.post("/infer", json={**model, "image": uris})
    assert response.status_code == 200, response.text
    assert cosine_rows(response.json()["image_embeddings"], reference_images(reference, blobs)).min() >= 0.9999


def test_uploaded_images_match_open_clip(http, loaded, model, reference):
    names = ["portrait.png", "cmyk.jpg"]
    files = [("image", (name, IMAGES[name], "application/octet-stream")) for name in names]
    response = http.post("/infer_image", data=model, files=files)
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"image_embeddings", "processingTimeMs"}
    assert cosine_rows(body["image_embeddings"], reference_images(reference, [IMAGES[n] for n in names])).min() >= 0.9999


def test_text_and_images_in_one_request_and_chunked(http, loaded, model, reference, images):
    texts = [f"caption number {i}" for i in range(10)]  # more than max_batch_size: chunks
    names = ["photo.jpg", "portrait.png", "alpha.png", "palette.gif", "cmyk.jpg", "photo.jpg"]
    response = http.post("/infer", json={**model, "text": texts, "image": [images.url(f"/{n}") for n in names]})
    assert response.status_code == 200, response.text
    body = response.json()
    assert cosine_rows(body["text_embeddings"], reference_text(reference, texts)).min() >= 0.9999
    assert cosine_rows(body["image_embeddings"], reference_images(reference, [IMAGES[n] for n in names])).min() >= 0.9999


@pytest.fixture(scope="module")
def siglip(tiny):
    """A tiny SigLIP whose config lies beside the tiny CLIP's, in the directory the gateway reads."""
    return build_tiny_siglip(tiny.config_dir.parent)


@pytest.fixture
def siglip_loaded(clip_gateway, siglip):
    """Loaded for one test, then unloaded and deleted: the tests after it see the CLIP model alone."""
    model = {"model_name": siglip.model_name, "pretrained": str(siglip.checkpoint)}
    response = httpx.post(f"{clip_gateway.url}/load_clip_model", json=model, timeout=300)
    assert response.status_code == 200, response.text
    try:
        yield model, response.json()
    finally:
        for route in ("/unload_model", "/delete_model"):
            httpx.post(f"{clip_gateway.url}{route}", json=model, timeout=60)


def test_a_siglip_model_with_a_hugging_face_tokenizer_matches_open_clip(http, siglip_loaded, siglip, images):
    model, loaded = siglip_loaded
    assert loaded["status"] == "loaded" and loaded["converted"] is True
    assert (loaded["max_seq_length"], loaded["image_size"]) == (16, [32, 32])
    reference = reference_model(siglip)
    texts = ["A photo of a CAT!", "a diagram", "a very long caption that goes on " * 10, "Ünïcödé ☃ &amp; co", ""]
    names = ["photo.jpg", "portrait.png", "alpha.png", "palette.gif", "cmyk.jpg"]
    response = http.post("/infer", json={**model, "text": texts, "image": [images.url(f"/{n}") for n in names]})
    assert response.status_code == 200, response.text
    body = response.json()
    assert cosine_rows(body["text_embeddings"], reference_text(reference, texts)).min() >= 0.9999
    assert cosine_rows(body["image_embeddings"], reference_images(reference, [IMAGES[n] for n in names])).min() >= 0.9999
    assert response.headers["x-truncated-inputs"] == "1"
    raw = http.post("/infer", json={**model, "text": texts[:1], "normalize": False}).json()["text_embeddings"]
    np.testing.assert_allclose(raw, reference_text(reference, texts[:1]), rtol=1e-3, atol=1e-4)


def assert_error(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["status"], error["code"]) == (status, code), error
    assert "Traceback" not in response.text
    return error["message"]


def test_image_urls_cannot_reach_private_addresses(http, loaded, model, images, forbidden):
    images.redirect("/redirect-to-loopback", forbidden.url("/secret.png"))
    port = forbidden.port
    refused = [
        forbidden.url("/secret.png"),
        f"http://localhost:{port}/secret.png",
        f"http://2130706433:{port}/secret.png",
        f"http://0x7f.1:{port}/secret.png",
        f"http://[::1]:{port}/secret.png",
        f"http://[::ffff:127.0.0.1]:{port}/secret.png",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/x.png",
        "http://[fd00::1]/x.png",
        images.url("/redirect-to-loopback"),
        "file:///etc/passwd",
    ]
    for url in refused:
        response = http.post("/infer", json={**model, "image": [images.url("/photo.jpg"), url]})
        message = assert_error(response, 400, "image_url_refused")
        assert message.startswith("image 1: "), message
    assert forbidden.requests == []


@pytest.mark.parametrize(
    "path, body, code, message",
    [
        ("/not-an-image.png", b"<html>hello</html>", "invalid_image", "not an image"),
        ("/truncated.jpg", IMAGES["photo.jpg"][:3000], "invalid_image", "truncated"),
        ("/heavy.png", b"\0" * (MAX_IMAGE_BYTES + 1), "image_too_large", "bytes"),
        ("/huge.png", encode(Image.new("L", (2100, 2100)), "PNG"), "image_too_large", "2100x2100"),
        ("/missing.png", None, "image_fetch_failed", "HTTP 404"),
    ],
)
def test_bad_images_get_a_400_naming_the_image(http, loaded, model, images, path, body, code, message):
    if body is not None:
        images.add(path, body)
    response = http.post("/infer", json={**model, "image": [images.url(path)]})
    assert message in assert_error(response, 400, code)
    assert "image 0: " in response.json()["error"]["message"]


def test_bad_inputs_are_clear_4xx_and_the_service_keeps_serving(http, loaded, model, images, clip_gateway, reference):
    uri = "data:image/png;base64,@@@not base64@@@"
    assert "base64" in assert_error(http.post("/infer", json={**model, "image": [uri]}), 400, "invalid_image")
    too_many = [images.url("/photo.jpg")] * 9
    assert "limit is 8" in assert_error(http.post("/infer", json={**model, "image": too_many}), 413, "too_many_inputs")
    no_pretrained = http.post("/infer", json={"model_name": model["model_name"], "text": ["a"]})
    assert "pretrained" in assert_error(no_pretrained, 400, "bad_request")
    unknown = http.post("/infer", json={**model, "pretrained": "/nonexistent/other.pt", "text": ["a"]})
    assert_error(unknown, 404, "model_not_found")
    assert_error(http.post("/load_clip_model", json={**model, "pretrained": "/nowhere/x.pt"}), 404, "model_not_found")
    assert_error(http.post("/load_clip_model", json={**model, "pretrained": "relative/x.pt"}), 400, "bad_request")
    assert_error(http.post("/load_clip_model", json={"model_name": "../etc", "pretrained": "x"}), 422, "invalid_model_name")
    files = [("image", ("x.png", b"not an image", "image/png"))]
    assert "image 0" in assert_error(http.post("/infer_image", data=model, files=files), 400, "invalid_image")
    # After all that, the service answers as before.
    good = http.post("/infer", json={**model, "image": [images.url("/photo.jpg")], "text": ["ok"]})
    assert good.status_code == 200, good.text
    assert cosine_rows(good.json()["text_embeddings"], reference_text(reference, ["ok"]))[0] >= 0.9999
    served_image = good.json()["image_embeddings"]
    assert cosine_rows(served_image, reference_images(reference, [IMAGES["photo.jpg"]]))[0] >= 0.9999
    assert httpx.get(f"{clip_gateway.url}/health/ready").json() == {"status": "ready"}


def test_image_requests_past_the_backlog_share_of_their_deadline_are_refused_at_once(
    clip_gateway, loaded, model, images, reference
):
    """Triton batches a CLIP model, so the gateway admits its image requests by the work it
    has admitted and not answered (the backlog) at the rate it was answered. Requests whose
    images hang on a held route stand for a backlog; a request whose deadline cannot hold
    them is refused with 503 and Retry-After, one with time enough is answered, and the
    held ones are answered once their images come."""
    uri = "data:image/jpeg;base64," + base64.b64encode(IMAGES["photo.jpg"]).decode()
    expected = reference_images(reference, [IMAGES["photo.jpg"]])
    release = threading.Event()
    images.add("/held.jpg", IMAGES["photo.jpg"], hold=release)
    held_url = images.url("/held.jpg")
    try:
        with clip_gateway.client() as http:
            for _ in range(3):  # answered requests: the model's rate
                assert http.post("/infer", json={**model, "image": [uri] * 8}).status_code == 200
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                held = [
                    pool.submit(
                        httpx.post, f"{clip_gateway.url}/infer", json={**model, "image": [held_url] * 8}, timeout=60
                    )
                    for _ in range(2)
                ]
                # Both admitted: their 16 images are being fetched.
                wait_until(lambda: images.requests.count("/held.jpg") == 16, 30, "the held images to be asked for")
                # 24 images' work, past 80% of a millisecond at any rate this model reaches.
                refused = http.post("/infer", json={**model, "image": [uri] * 8}, headers={"x-request-timeout": "0.001"})
                message = assert_error(refused, 503, "overloaded")
                assert "of work admitted with this request, past 80% of its 0.001s deadline" in message
                assert int(refused.headers["retry-after"]) >= 1
                answered = http.post("/infer", json={**model, "image": [uri] * 8})
                assert answered.status_code == 200, answered.text
                assert cosine_rows(answered.json()["image_embeddings"], expected).min() >= 0.9999
                release.set()
                for future in held:
                    response = future.result()
                    assert response.status_code == 200, response.text
                    assert cosine_rows(response.json()["image_embeddings"], expected).min() >= 0.9999
    finally:
        release.set()


def test_listing_and_metrics_show_one_model_with_two_parts(http, loaded, model, tiny):
    (listed,) = http.get("/loaded_models").json()["models"]
    assert (listed["model_name"], listed["pretrained"], listed["kind"]) == (tiny.model_name, str(tiny.checkpoint), "clip")
    assert [p.split("_")[-2] for p in listed["triton_parts"]] == ["text", "image"]
    (on_disk,) = http.get("/repository_models").json()["models"]
    assert on_disk["loaded"] is True and on_disk["triton_parts"] == listed["triton_parts"]
    stats = {s["triton_name"]: s for s in http.get("/metrics").json()["model_stats"]}
    for triton_name, part in zip(listed["triton_parts"], ("text_encoder", "image_encoder")):
        entry = stats[triton_name]
        assert (entry["name"], entry["pretrained"], entry["part"]) == (tiny.model_name, str(tiny.checkpoint), part)
        assert entry["inference_count"] > 0


def test_restart_restores_then_unload_and_delete_treat_it_as_one(clip_gateway, loaded, model, settings, reference, tmp_path):
    clip_gateway.stop()
    restarted = start_gateway(clip_gateway.repository, tmp_path / "restarted.log", **settings)
    try:
        wait_ready(restarted)
        with restarted.client() as http:
            texts = ["back after a restart"]
            served = http.post("/infer", json={**model, "text": texts}).json()["text_embeddings"]
            assert cosine_rows(served, reference_text(reference, texts)).min() >= 0.9999

            assert http.post("/unload_model", json=model).status_code == 200
            assert_error(http.post("/infer", json={**model, "text": ["a"]}), 409, "model_not_loaded")
            assert http.get("/loaded_models").json()["models"] == []
            assert http.post("/delete_model", json=model).status_code == 200
            assert_error(http.post("/infer", json={**model, "text": ["a"]}), 404, "model_not_found")
            assert http.get("/repository_models").json()["models"] == []
            assert [p.name for p in clip_gateway.repository.iterdir() if not p.name.startswith(".")] == []
    finally:
        restarted.stop()
