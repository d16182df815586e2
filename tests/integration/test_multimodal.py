"""Multimodal sentence-transformers end to end: HTTP -> gateway -> real tritonserver. One
gateway serves the tiny CLIP-form model (its texts and images each against
``SentenceTransformer.encode``: /infer, /infer_image, Cohere's /v2/embed through
``cohere.ClientV2``, a bulk job of /v2/embed lines with images), the tiny vision-language
model, a tiny Qwen3-VL and a tiny Qwen2.5-VL (the same routes, prompts as the library's
system message, a text and an image together, the OpenAI client) and a tiny reranker (Cohere's /v2/rerank
against ``CrossEncoder.predict``). Images come from a local server on 127.0.0.2, the
address the allow-list admits; every comparison is of answers the model computed (inputs
of their own, images are never cached)."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest
from PIL import Image

from tests.helpers import cosine_rows
from tests.image_server import ImageServer
from tests.multimodal_models import CLIP_POSITIONS, clip_form_model, vision_language_model
from tests.tiny_models import cross_encoder

from .conftest import run_batch, start_gateway

MODEL = "org/tiny-clip-form"
RERANKER = "org/tiny-reranker"
VISION_LANGUAGE = "org/tiny-vl"
QWEN3_VL = "org/tiny-qwen3-vl"
QWEN2_5_VL = "org/tiny-qwen2.5-vl"
# The tiny vision-language model's max length: its position embeddings (its tokenizer names none).
VL_POSITIONS = 256


def picture(width: int, height: int, seed: int, mode: str = "RGB", fmt: str = "PNG") -> bytes:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 // width, y * 255 // height, (x * y) % 256], axis=-1)
    image = Image.fromarray(np.clip(base + rng.integers(0, 60, (height, width, 3)), 0, 255).astype(np.uint8))
    buffer = io.BytesIO()
    image.convert(mode).save(buffer, format=fmt)
    return buffer.getvalue()


IMAGES = {
    "photo.jpg": picture(320, 240, 1, fmt="JPEG"),
    "portrait.png": picture(45, 100, 2),
    "alpha.png": picture(60, 50, 3, mode="RGBA"),
    "tiny.png": picture(7, 5, 4),
}


def data_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


@pytest.fixture(scope="module")
def images():
    server = ImageServer("127.0.0.2")
    for name, data in IMAGES.items():
        server.add(f"/{name}", data, headers={"Content-Type": "image/*"})
    yield server
    server.close()


@pytest.fixture(scope="module")
def directories(tmp_path_factory):
    root = tmp_path_factory.mktemp("multimodal-models")
    return {
        "clip": clip_form_model(root / "clip"), "reranker": cross_encoder(root / "reranker"),
        "vl": vision_language_model(root / "vl", seed=3),
        "qwen3_vl": vision_language_model(root / "qwen3-vl", seed=5, architecture="qwen3_vl"),
        "qwen2_5_vl": vision_language_model(root / "qwen2.5-vl", seed=6, architecture="qwen2_5_vl"),
    }


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, directories, images):
    repository = tmp_path_factory.mktemp("multimodal_repository")
    gw = start_gateway(repository, tmp_path_factory.mktemp("logs") / "multimodal-gateway.log",
                       image_fetch_allow="127.0.0.2", max_batch_size="4")
    with gw.client() as http:
        loads = ((MODEL, "clip"), (RERANKER, "reranker"), (VISION_LANGUAGE, "vl"), (QWEN3_VL, "qwen3_vl"),
                 (QWEN2_5_VL, "qwen2_5_vl"))
        for name, key in loads:
            body = {"model_name": name, "model_path": str(directories[key])}
            response = http.post("/load_sentence_transformer_model", json=body)
            assert response.status_code == 200, response.text
    yield gw
    gw.stop()


@pytest.fixture
def http(gateway):
    with gateway.client() as client:
        yield client


@pytest.fixture(scope="module")
def library(directories):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(directories["clip"]), device="cpu")
    model[0].max_seq_length = CLIP_POSITIONS  # what the conversion served it with (its tokenizer names none)
    return model


def encode_images(library, blobs: list[bytes]) -> np.ndarray:
    return library.encode([Image.open(io.BytesIO(blob)) for blob in blobs])


def test_the_load_answers_a_multimodal_model_with_its_image_size(http):
    listed = {entry["model_name"]: entry for entry in http.get("/loaded_models").json()["models"]}[MODEL]
    assert listed["kind"] == "multimodal" and listed["max_seq_length"] == CLIP_POSITIONS
    assert listed["image_size"] == [32, 32] and listed["modalities"] == ["text", "image"]
    assert listed["triton_parts"] == ["org--tiny-clip-form", "org--tiny-clip-form---image"]


def test_infer_answers_texts_and_images_as_encode(http, library, images):
    texts = ["infer: a photo of a cat", "infer: " + "a dog in the snow " * 8]
    urls = [f"http://127.0.0.2:{images.port}/{name}" for name in ("photo.jpg", "portrait.png", "alpha.png")]
    body = {"model_name": MODEL, "text": texts, "image": [*urls, data_uri(IMAGES["tiny.png"])], "normalize": False}
    response = http.post("/infer", json=body)
    assert response.status_code == 200, response.text
    assert response.headers["x-cached-inputs"] == "0" and response.headers["x-truncated-inputs"] == "1"
    answer = response.json()
    blobs = [IMAGES[name] for name in ("photo.jpg", "portrait.png", "alpha.png", "tiny.png")]
    assert cosine_rows(answer["text_embeddings"], library.encode(texts)).min() >= 0.9999
    expected = encode_images(library, blobs)
    assert cosine_rows(answer["image_embeddings"], expected).min() >= 0.9999
    np.testing.assert_allclose(answer["image_embeddings"], expected, rtol=1e-3, atol=1e-4)


def test_infer_image_takes_uploads(http, library):
    files = [("image", (name, IMAGES[name], "image/png")) for name in ("alpha.png", "photo.jpg")]
    response = http.post("/infer_image", data={"model_name": MODEL}, files=files)
    assert response.status_code == 200, response.text
    expected = encode_images(library, [IMAGES["alpha.png"], IMAGES["photo.jpg"]])
    assert cosine_rows(response.json()["image_embeddings"], expected).min() >= 0.9999


def test_cohere_clients_embed_texts_images_and_inputs(gateway, library, images):
    import cohere

    client = cohere.ClientV2(api_key="unused", base_url=gateway.url, timeout=120)
    texts = ["cohere: search for a lighthouse", "cohere: a bowl of ramen"]
    answer = client.embed(model=MODEL, input_type="search_document", texts=texts, embedding_types=["float", "ubinary"])
    assert answer.texts == texts and answer.meta.api_version.version == "2"
    assert cosine_rows(answer.embeddings.float_, library.encode(texts)).min() >= 0.9999
    assert np.asarray(answer.embeddings.ubinary).shape == (2, 2)

    blobs = [IMAGES["portrait.png"], IMAGES["tiny.png"]]
    answer = client.embed(model=MODEL, input_type="image", images=[data_uri(blob) for blob in blobs])
    assert cosine_rows(answer.embeddings.float_, encode_images(library, blobs)).min() >= 0.9999

    inputs = [
        {"content": [{"type": "image_url", "image_url": {"url": f"http://127.0.0.2:{images.port}/photo.jpg"}}]},
        {"content": [{"type": "text", "text": "cohere: an input of text"}]},
    ]
    answer = client.embed(model=MODEL, input_type="search_query", inputs=inputs, output_dimension=8)
    expected = np.concatenate([encode_images(library, [IMAGES["photo.jpg"]]), library.encode(["cohere: an input of text"])])
    served = np.asarray(answer.embeddings.float_)
    assert served.shape == (2, 8) and cosine_rows(served, expected[:, :8]).min() >= 0.9999


def test_cohere_clients_rerank(gateway, directories):
    import cohere
    from sentence_transformers import CrossEncoder

    client = cohere.ClientV2(api_key="unused", base_url=gateway.url, timeout=120)
    documents = ["rerank: the quick brown fox", "rerank: stocks fell", "rerank: a man is eating food"]
    answer = client.rerank(model=RERANKER, query="rerank: what is the fox doing", documents=documents)
    expected = CrossEncoder(str(directories["reranker"]), device="cpu").predict(
        [("rerank: what is the fox doing", document) for document in documents]
    )
    assert [result.index for result in answer.results] == list(np.argsort(-expected, kind="stable"))
    np.testing.assert_allclose([result.relevance_score for result in answer.results], np.sort(expected)[::-1], atol=1e-4)


def test_a_bulk_job_of_cohere_lines_with_images(gateway, library, images):
    url = f"http://127.0.0.2:{images.port}/alpha.png"
    bodies = [
        {"model": MODEL, "input_type": "image", "images": [url, data_uri(IMAGES["tiny.png"])]},
        {"model": MODEL, "input_type": "search_document", "inputs": [
            {"content": [{"type": "text", "text": "bulk: a text among images"}]},
            {"content": [{"type": "image_url", "image_url": {"url": data_uri(IMAGES["portrait.png"])}}]},
        ]},
        {"model": MODEL, "input_type": "image", "images": ["data:image/png;base64,AAAA"]},
    ]
    lines = [json.dumps({"custom_id": f"l{i}", "method": "POST", "url": "/v2/embed", "body": body})
             for i, body in enumerate(bodies)]
    batch, output, errors = run_batch(gateway, lines, "/v2/embed")
    assert batch.status == "completed"
    first = output["l0"]["response"]["body"]["embeddings"]["float"]
    assert cosine_rows(first, encode_images(library, [IMAGES["alpha.png"], IMAGES["tiny.png"]])).min() >= 0.9999
    second = output["l1"]["response"]["body"]["embeddings"]["float"]
    expected = np.concatenate([library.encode(["bulk: a text among images"]), encode_images(library, [IMAGES["portrait.png"]])])
    assert cosine_rows(second, expected).min() >= 0.9999
    # A line whose image cannot be used is that line's error; the others were answered.
    assert [error["custom_id"] for error in errors] == ["l2"]
    assert errors[0]["response"]["status_code"] == 400


# --- the vision-language form: every input rendered through the model's chat template


@pytest.fixture(scope="module")
def vl_library(directories):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(directories["vl"]), device="cpu")
    model[0].max_seq_length = VL_POSITIONS  # what the conversion served it with (its tokenizer names none)
    return model


def test_the_load_answers_a_vision_language_model(http):
    listed = {entry["model_name"]: entry for entry in http.get("/loaded_models").json()["models"]}[VISION_LANGUAGE]
    assert listed["kind"] == "vision_language" and listed["max_seq_length"] == VL_POSITIONS
    assert listed["modalities"] == ["text", "image", "video", "message"]
    assert listed["triton_parts"] == ["org--tiny-vl", "org--tiny-vl---image"]


def test_vision_language_texts_and_images_are_encodes(http, vl_library, images):
    texts = ["vl: a photo of a cat", "vl: " + "a dog in the snow " * 80, "vl: Grüße <b>bold</b>"]
    names = ["photo.jpg", "portrait.png", "alpha.png", "tiny.png", "photo.jpg"]
    sources = [f"http://127.0.0.2:{images.port}/{name}" for name in names[:3]]
    sources += [data_uri(IMAGES[name]) for name in names[3:]]
    body = {"model_name": VISION_LANGUAGE, "text": texts, "image": sources}
    response = http.post("/infer", json=body)
    assert response.status_code == 200, response.text
    assert response.headers["x-cached-inputs"] == "0" and response.headers["x-truncated-inputs"] == "1"
    answer = response.json()
    np.testing.assert_allclose(answer["text_embeddings"], vl_library.encode(texts), atol=1e-4)
    # Five images: two calls of the language graph (the gateway's batch size is 4).
    expected = encode_images(vl_library, [IMAGES[name] for name in names])
    np.testing.assert_allclose(answer["image_embeddings"], expected, atol=1e-4)
    assert cosine_rows(answer["image_embeddings"], expected).min() >= 0.9999


def test_vision_language_prompts_are_the_librarys_system_message(http, vl_library):
    texts, blobs = ["vl prompted: where is the lighthouse"], [IMAGES["portrait.png"]]
    body = {"model_name": VISION_LANGUAGE, "text": texts, "image": [data_uri(blob) for blob in blobs],
            "prompt": "Find the image."}
    response = http.post("/infer", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    prompted = vl_library.encode(texts, prompt="Find the image.")
    np.testing.assert_allclose(answer["text_embeddings"], prompted, atol=1e-4)
    assert cosine_rows(prompted, vl_library.encode(texts)).max() < 0.999  # the prompt changed it
    images = [Image.open(io.BytesIO(blob)) for blob in blobs]
    prompted_images = vl_library.encode(images, prompt="Find the image.")
    np.testing.assert_allclose(answer["image_embeddings"], prompted_images, atol=1e-4)


def test_vision_language_through_openai_and_cohere_clients(gateway, vl_library, images):
    import cohere
    import openai

    texts = ["vl openai: a bowl of ramen", "vl openai: stocks fell"]
    client = openai.OpenAI(api_key="unused", base_url=gateway.url + "/v1", timeout=120)
    answer = client.embeddings.create(model=VISION_LANGUAGE, input=texts)
    np.testing.assert_allclose([item.embedding for item in answer.data], vl_library.encode(texts), atol=1e-4)

    cohere_client = cohere.ClientV2(api_key="unused", base_url=gateway.url, timeout=120)
    inputs = [
        {"content": [{"type": "image_url", "image_url": {"url": f"http://127.0.0.2:{images.port}/alpha.png"}}]},
        {"content": [{"type": "text", "text": "vl cohere: an input of text"}]},
    ]
    # An input of a text and an image together: one embedding of both, as the library's dict gives it.
    together = {"content": [{"type": "text", "text": "vl cohere: this photo"},
                            {"type": "image_url", "image_url": {"url": data_uri(IMAGES["portrait.png"])}}]}
    answer = cohere_client.embed(model=VISION_LANGUAGE, input_type="search_query", inputs=[*inputs, together])
    portrait = Image.open(io.BytesIO(IMAGES["portrait.png"]))
    expected = np.concatenate([
        encode_images(vl_library, [IMAGES["alpha.png"]]), vl_library.encode(["vl cohere: an input of text"]),
        vl_library.encode([{"text": "vl cohere: this photo", "image": portrait}]),
    ])
    np.testing.assert_allclose(answer.embeddings.float_, expected, atol=1e-4)
    assert answer.meta.billed_units.images == 2


def test_vision_language_uploads_and_teis_embed(gateway, http, vl_library):
    files = [("image", (name, IMAGES[name], "image/png")) for name in ("alpha.png", "tiny.png")]
    response = http.post("/infer_image", data={"model_name": VISION_LANGUAGE}, files=files)
    assert response.status_code == 200, response.text
    expected = encode_images(vl_library, [IMAGES["alpha.png"], IMAGES["tiny.png"]])
    np.testing.assert_allclose(response.json()["image_embeddings"], expected, atol=1e-4)
    texts = ["vl tei: a lighthouse at dusk"]
    response = http.post(f"/tei/{VISION_LANGUAGE}/embed", json={"inputs": texts})
    assert response.status_code == 200, response.text
    np.testing.assert_allclose(response.json(), vl_library.encode(texts), atol=1e-4)


def test_teis_tokenize_gives_a_vision_language_text_as_the_model_reads_it(http, vl_library):
    """Through its chat template (the template's text tokens too), as the library's own
    preprocessing tokenizes it; without special tokens, the text alone."""
    text = "vl tokens: a lighthouse at dusk, Grüße"
    templated = http.post(f"/tei/{VISION_LANGUAGE}/tokenize", json={"inputs": [text]})
    assert templated.status_code == 200, templated.text
    (tokens,) = templated.json()
    features = vl_library.preprocess([text])
    assert [token["id"] for token in tokens] == features["input_ids"][0][features["attention_mask"][0].bool()].tolist()
    # Each token's text is the part of the rendered text it covers: the template's, then the
    # text's (a byte-level token inside a character covers all of it).
    covered = "".join(token["text"] for token in tokens)
    assert covered.startswith("<|im_start|>user\nvl tokens: a lighthouse at dusk, Gr"), covered
    alone = http.post(f"/tei/{VISION_LANGUAGE}/tokenize", json={"inputs": [text], "add_special_tokens": False})
    assert alone.status_code == 200, alone.text
    expected = vl_library[0].tokenizer(text, add_special_tokens=False)["input_ids"]
    assert [token["id"] for token in alone.json()[0]] == expected
    assert len(tokens) > len(expected)


def test_a_bulk_job_of_vision_language_images(gateway, vl_library):
    bodies = [
        {"model": VISION_LANGUAGE, "input_type": "image", "images": [data_uri(IMAGES["tiny.png"])]},
        {"model": VISION_LANGUAGE, "input_type": "image", "images": [data_uri(picture(1000, 4, 9))]},
    ]
    lines = [json.dumps({"custom_id": f"v{i}", "method": "POST", "url": "/v2/embed", "body": body})
             for i, body in enumerate(bodies)]
    batch, output, errors = run_batch(gateway, lines, "/v2/embed")
    assert batch.status == "completed"
    served = output["v0"]["response"]["body"]["embeddings"]["float"]
    np.testing.assert_allclose(served, encode_images(vl_library, [IMAGES["tiny.png"]]), atol=1e-4)
    # An image past the processor's aspect limit is that line's error (the library refuses it too).
    assert [error["custom_id"] for error in errors] == ["v1"]
    assert errors[0]["response"]["status_code"] == 400


@pytest.mark.parametrize("name", [QWEN3_VL, QWEN2_5_VL])
def test_qwen3_vl_and_qwen2_5_vl_models_answer_as_encode(gateway, http, directories, images, name):
    """Qwen3-VL's learned position grid resampled per image and its deepstack rows, Qwen2.5-VL's
    patches sent window by window and its rows put back: as the library computes them."""
    import cohere
    from sentence_transformers import SentenceTransformer

    directory = directories[{QWEN3_VL: "qwen3_vl", QWEN2_5_VL: "qwen2_5_vl"}[name]]
    library = SentenceTransformer(str(directory), device="cpu")
    library[0].max_seq_length = VL_POSITIONS
    texts = ["family: a photo of a cat", "family: " + "snow " * 300]
    names = ["photo.jpg", "portrait.png", "tiny.png"]
    body = {"model_name": name, "text": texts, "image": [data_uri(IMAGES[image]) for image in names]}
    response = http.post("/infer", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    np.testing.assert_allclose(answer["text_embeddings"], library.encode(texts), atol=1e-4)
    expected = encode_images(library, [IMAGES[image] for image in names])
    np.testing.assert_allclose(answer["image_embeddings"], expected, atol=1e-4)
    assert cosine_rows(answer["image_embeddings"][:1], answer["image_embeddings"][1:2]).max() < 0.99
    together = {"content": [{"type": "image_url", "image_url": {"url": f"http://127.0.0.2:{images.port}/alpha.png"}},
                            {"type": "text", "text": "family: the picture above"}]}
    client = cohere.ClientV2(api_key="unused", base_url=gateway.url, timeout=120)
    served = client.embed(model=name, input_type="search_document", inputs=[together]).embeddings.float_
    alpha = Image.open(io.BytesIO(IMAGES["alpha.png"]))
    expected = library.encode([{"image": alpha, "text": "family: the picture above"}])
    np.testing.assert_allclose(served, expected, atol=1e-4)


def test_vision_language_refusals_say_why(http):
    body = {"model_name": VISION_LANGUAGE, "text": ["vl: chunked " * 50], "chunking": {"max_tokens": 16}}
    response = http.post("/infer", json=body)
    assert response.status_code == 400, response.text
    assert "chat template" in response.json()["error"]["message"]
    response = http.post("/infer", json={"model_name": VISION_LANGUAGE, "image": [data_uri(picture(1000, 4, 9))]})
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_image"
    response = http.post("/infer", json={"model_name": VISION_LANGUAGE, "text": ["vl: still served"]})
    assert response.status_code == 200
