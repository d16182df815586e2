def test_metrics_use_user_model_names_and_show_average_batch(client):
    body = client.get("/metrics").json()
    (entry,) = body["model_stats"]
    assert entry["name"] == "org/loaded"
    assert entry["triton_name"] == "org--loaded"
    assert entry["inference_count"] == 12 and entry["execution_count"] == 3
    assert entry["average_batch_size"] == 4.0
    assert entry["inference_stats"]["success"]["count"] == 3
