"""Load requests for variants ('optimize', 'quantize') with fake parts: which model is loaded,
what the answer says, and every bad request a 422 in the one error shape."""

from __future__ import annotations

import pytest

from embedgate.api.cli.client import EmbedgateClient
from embedgate.api.endpoints.schemas.management import LoadSentenceTransformerRequest
from embedgate.api.models.control import LoadOutcome
from embedgate.api.models.names import to_triton_name
from embedgate.contract.spec import ParityResult, VariantInfo
from tests.api.conftest import FakeModel, fake_metadata

from .test_inference import assert_error

MODEL = "org/model"


class VariantModel(FakeModel):
    @property
    def metadata(self):
        metadata = fake_metadata(self.name)
        if "@" in self.name:
            variant = self.name.rpartition("@")[2]
            metadata.variant = VariantInfo(name=variant, onnx_bytes=1000)
            metadata.parity = ParityResult(passed=True, threshold=0.99, min_cosine=0.995, sentences=12, mean_cosine=0.998)
        return metadata


@pytest.fixture
def loads(gateway):
    """The names the route asked the registry to load."""
    names = []

    async def load_sentence_transformer(
        name, model_path=None, *, trust_remote_code=False, revision=None, on_source_change="convert", progress=None
    ):
        to_triton_name(name)  # as the registry does first
        names.append(name)
        return LoadOutcome(VariantModel(name), already_loaded=False, converted=True)

    gateway.models.load_sentence_transformer = load_sentence_transformer
    return names


@pytest.mark.parametrize(
    "options, loaded",
    [
        ({}, MODEL),
        ({"optimize": True}, f"{MODEL}@optimized"),
        ({"quantize": "int8"}, f"{MODEL}@int8"),
        # int8 is quantized from the unfused graph: asking for both is still '@int8'.
        ({"optimize": True, "quantize": "int8"}, f"{MODEL}@int8"),
        ({"optimize": False, "quantize": None}, MODEL),
    ],
)
def test_options_load_the_variant_as_a_model_of_its_own(client, loads, options, loaded):
    response = client.post("/load_sentence_transformer_model", json={"model_name": MODEL, **options})
    assert response.status_code == 200, response.text
    assert loads == [loaded]
    body = response.json()
    assert body["model_name"] == loaded
    assert body["variant"] == (loaded.rpartition("@")[2] if "@" in loaded else None)


def test_a_variant_can_be_named_directly(client, loads):
    response = client.post("/load_sentence_transformer_model", json={"model_name": f"{MODEL}@int8"})
    assert response.status_code == 200, response.text
    assert loads == [f"{MODEL}@int8"]
    assert response.json()["parity_min_cosine"] == 0.995


@pytest.mark.parametrize("quantize", ["int4", "INT8", "fp16", "", 8, True])
def test_an_unknown_quantization_is_a_422(client, loads, quantize):
    response = client.post("/load_sentence_transformer_model", json={"model_name": MODEL, "quantize": quantize})
    message = assert_error(response, 422, "invalid_request")
    assert "quantize" in message
    assert loads == []


def test_optimize_must_be_a_boolean(client, loads):
    response = client.post("/load_sentence_transformer_model", json={"model_name": MODEL, "optimize": "yes please"})
    assert "optimize" in assert_error(response, 422, "invalid_request")
    assert loads == []


def test_a_variant_name_with_options_is_a_422(client, loads):
    body = {"model_name": f"{MODEL}@optimized", "quantize": "int8"}
    message = assert_error(client.post("/load_sentence_transformer_model", json=body), 422, "invalid_request")
    assert "already names a variant" in message
    assert loads == []


@pytest.mark.parametrize("name", [f"{MODEL}@fp16", f"{MODEL}@int8@int8", "@int8"])
def test_unknown_variant_suffixes_are_invalid_names(client, loads, name):
    response = client.post("/load_sentence_transformer_model", json={"model_name": name})
    assert_error(response, 422, "invalid_model_name")
    assert loads == []


def test_a_bad_variant_name_is_a_plain_422_even_when_progress_is_asked_for(client, loads):
    response = client.post(
        "/load_sentence_transformer_model",
        json={"model_name": f"{MODEL}@fp16"},
        headers={"accept": "application/x-ndjson"},
    )
    assert_error(response, 422, "invalid_model_name")


@pytest.mark.parametrize("options", [{"quantize": "int8"}, {"optimize": True}, {"optimize": False}])
def test_clip_models_refuse_variants_clearly(client, options):
    body = {"model_name": "ViT-B-32", "pretrained": "laion2b_s34b_b79k", **options}
    message = assert_error(client.post("/load_clip_model", json=body), 422, "invalid_request")
    assert "sentence-transformer models" in message


def test_served_name():
    assert LoadSentenceTransformerRequest(model_name=MODEL).served_name() == MODEL
    assert LoadSentenceTransformerRequest(model_name=MODEL, optimize=True).served_name() == f"{MODEL}@optimized"
    assert LoadSentenceTransformerRequest(model_name=MODEL, quantize="int8").served_name() == f"{MODEL}@int8"


def test_listings_show_the_variant_and_its_parity(client, gateway):
    gateway.registry.loaded_names = {MODEL, f"{MODEL}@int8"}
    gateway.registry.loaded = lambda: [VariantModel(n) for n in sorted(gateway.registry.loaded_names)]
    models = {m["model_name"]: m for m in client.get("/loaded_models").json()["models"]}
    assert models[f"{MODEL}@int8"]["variant"] == "int8"
    assert models[f"{MODEL}@int8"]["parity_min_cosine"] == 0.995
    assert models[f"{MODEL}@int8"]["parity_mean_cosine"] == 0.998
    assert models[MODEL]["variant"] is None
    assert models[MODEL]["parity_min_cosine"] == 1.0


def test_the_cli_client_sends_the_options(client, loads):
    with EmbedgateClient("http://testserver", http=client) as embedgate:
        assert embedgate.load(MODEL, optimize=True)["model_name"] == f"{MODEL}@optimized"
        assert embedgate.load(MODEL, quantize="int8")["model_name"] == f"{MODEL}@int8"
        assert embedgate.load(MODEL)["model_name"] == MODEL
    assert loads == [f"{MODEL}@optimized", f"{MODEL}@int8", MODEL]
