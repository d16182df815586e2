"""Binary answers: the form a client's Accept asks for, an answer of one array as a .npy file
or as its bytes with its dtype and shape, the same numbers as the JSON answer, and a 406
where the answer is not one array and the client takes no JSON."""

import io

import numpy as np
import pytest

from embedgate.api.http.responses import JSON, NPY, OCTETS, npy_bytes, wanted


@pytest.mark.parametrize(
    ("accept", "form"),
    [
        (None, JSON), ("", JSON), ("*/*", JSON), ("application/json", JSON), ("text/html", JSON),
        (NPY, NPY), (OCTETS, OCTETS), (f"{NPY}, {JSON}", NPY), (f"{JSON}, {NPY}", JSON),
        (f"{JSON};q=0.5, {NPY}", NPY), (f"{NPY};q=0, */*", JSON), (f"{OCTETS};q=0.9, {NPY};q=0.8", OCTETS),
    ],
)
def test_the_form_is_the_best_the_client_names(accept, form):
    assert wanted(accept) == form


def test_a_dense_answer_comes_as_npy_or_bytes_with_the_json_answers_numbers(client):
    body = {"model_name": "org/loaded", "text": ["a", "b c"]}
    as_json = client.post("/infer", json=body).json()["text_embeddings"]
    npy = client.post("/infer", json=body, headers={"accept": NPY})
    assert npy.status_code == 200 and npy.headers["content-type"] == NPY
    assert npy.headers["x-total-time-ms"]
    array = np.load(io.BytesIO(npy.content), allow_pickle=False)
    np.testing.assert_array_equal(array, np.asarray(as_json, dtype=np.float32))
    raw = client.post("/infer", json=body, headers={"accept": OCTETS})
    assert raw.headers["content-type"] == OCTETS
    assert (raw.headers["x-embedding-dtype"], raw.headers["x-embedding-shape"]) == ("float32", "2,3")
    np.testing.assert_array_equal(np.frombuffer(raw.content, dtype="<f4").reshape(2, 3), array)
    tei = client.post("/tei/org/loaded/embed", json={"inputs": ["a", "b c"]}, headers={"accept": NPY})
    np.testing.assert_array_equal(np.load(io.BytesIO(tei.content)), array)


def test_an_answer_that_is_not_one_array_is_json_or_406(client):
    # /infer of texts and images is two arrays: JSON where the client takes it, else 406.
    both = {"model_name": "org/loaded", "pretrained": "tag", "text": ["a"], "image": ["https://example.com/x.png"]}
    assert client.post("/infer", json=both, headers={"accept": f"{NPY}, */*;q=0.1"}).json()["image_embeddings"]
    refused = client.post("/infer", json=both, headers={"accept": NPY})
    assert refused.status_code == 406 and refused.json()["error"]["code"] == "not_acceptable"
    assert NPY in refused.json()["error"]["message"]


def test_answers_that_are_never_one_array_are_json_whatever_is_accepted(client):
    # OpenAI's answer is JSON (its own base64 is its binary form), as are scores.
    body = {"model": "org/loaded", "input": ["a"]}
    for accept in (NPY, OCTETS, f"{NPY}, */*;q=0.1"):
        answer = client.post("/v1/embeddings", json=body, headers={"accept": accept})
        assert answer.status_code == 200 and answer.headers["content-type"] == JSON
        assert answer.json()["data"][0]["embedding"]


@pytest.mark.parametrize(
    "array",
    [np.ones((2, 3), np.float32), np.arange(5, dtype=np.int8), np.zeros((0, 4), np.uint8),
     np.full((32, 1024), 0.5, np.float32), np.ones((1, 1, 2), np.float32), np.ones((3, 7), np.float16)],
)
def test_npy_bytes_are_what_numpy_saves(array):
    saved = io.BytesIO()
    np.save(saved, array, allow_pickle=False)
    assert npy_bytes(array) == saved.getvalue()
