"""Triton's batching over a run, from two readings of /metrics."""

import aiohttp
from aiohttp import web

from embedgate.bench.server_stats import batching_delta, counters_from_entry, read_settled_counters, serves


def _entry(inferences, executions, requests, queue_ns, infer_ns):
    return {
        "name": "org/model",
        "triton_name": "org--model",
        "inference_count": inferences,
        "execution_count": executions,
        "inference_stats": {
            "success": {"count": requests, "ns": 0},
            "queue": {"count": requests, "ns": queue_ns},
            "compute_infer": {"count": requests, "ns": infer_ns},
        },
    }


def test_the_delta_covers_only_the_run():
    before = {"org--model": counters_from_entry(_entry(100, 50, 100, 1_000_000, 9_000_000))}
    after = {"org--model": counters_from_entry(_entry(420, 90, 180, 41_000_000, 89_000_000))}
    delta = batching_delta(before, after)
    assert delta["inferences"] == 320 and delta["executions"] == 40
    assert delta["average_batch_size"] == 8.0
    model = delta["models"]["org--model"]
    assert model["requests"] == 80
    assert model["queue_ms_per_request"] == 0.5
    assert model["compute_infer_ms_per_request"] == 1.0
    assert model["compute_output_ms_per_request"] == 0.0


def test_no_model_runs_gives_no_batch_size_and_missing_readings_give_nothing():
    same = {"org--model": counters_from_entry(_entry(10, 5, 10, 0, 0))}
    delta = batching_delta(same, same)
    assert delta["average_batch_size"] is None and delta["models"]["org--model"]["queue_ms_per_request"] is None
    assert batching_delta(None, same) is None
    # A Triton model that appeared during the run counts from zero.
    assert batching_delta({}, same)["inferences"] == 10


def test_a_text_model_is_its_own_entry_and_a_clip_model_is_its_two_encoders():
    text = serves("org/model")
    assert text({"name": "org/model", "triton_name": "org--model"})
    assert not text({"name": "org/model-large", "triton_name": "org--model-large"})
    clip = serves("ViT-B-32", "laion2b_s34b_b79k")
    for part in ("text_encoder", "image_encoder"):
        name = f"ViT-B-32_laion2b_s34b_b79k_{part}"
        assert clip({"name": name, "triton_name": name})
    # The same architecture with other weights is another model.
    assert not clip({"name": "ViT-B-32_openai_text_encoder", "triton_name": "ViT-B-32_openai_text_encoder"})


async def test_a_reading_waits_for_counters_still_being_recorded():
    readings = iter([10, 14, 16, 16, 99])

    async def metrics(request):
        count = next(readings)
        entry = {**_entry(count, count, count, 0, 0), "name": "org/model"}
        return web.json_response({"model_stats": [entry, {**entry, "name": "org/other", "triton_name": "org--other"}]})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    try:
        async with aiohttp.ClientSession() as session:
            counters = await read_settled_counters(session, url, serves("org/model"))
            assert list(counters) == ["org--model"]
            assert counters["org--model"].inferences == 16
            assert await read_settled_counters(session, url + "/nowhere", serves("org/model")) is None
    finally:
        await runner.cleanup()
