from embedgate.api.compute.requests.kinds import KINDS
from embedgate.api.endpoints.schemas.metrics import MetricsResponse

from .test_cohere_routes import MULTIMODAL


def test_metrics_use_user_model_names_and_show_average_batch(client):
    body = client.get("/metrics").json()
    (entry,) = body["model_stats"]
    assert entry["name"] == "org/loaded"
    assert entry["triton_name"] == "org--loaded"
    assert entry["inference_count"] == 12 and entry["execution_count"] == 3
    assert entry["average_batch_size"] == 4.0
    assert entry["inference_stats"]["success"]["count"] == 3


def test_a_model_of_several_parts_has_an_entry_per_part_as_its_schema_says(client, gateway, monkeypatch):
    gateway.registry.loaded_names = {"org/mm"}
    gateway.registry.changes["org/mm"] = MULTIMODAL
    (model,) = gateway.registry.loaded()
    parts = model.kind.parts(model.triton_name)

    async def statistics():
        return [{"name": part, "version": "1"} for part in parts]

    monkeypatch.setattr(gateway.client, "statistics", statistics)
    body = client.get("/metrics").json()
    assert [(entry["name"], entry["part"]) for entry in body["model_stats"]] == [("org/mm", "text"), ("org/mm", "image")]
    MetricsResponse.model_validate(body)  # what the document says of the answer


def test_the_schema_lists_every_part_every_kind_names():
    listed = set(MetricsResponse.model_json_schema()["$defs"]["ModelStats"]["properties"]["part"]["anyOf"][0]["enum"])
    assert listed == {part for kind in KINDS.values() for part in kind.metric_parts}
    assert {"text_encoder", "image_encoder", "model", "late_chunking"} <= listed
