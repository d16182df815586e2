import argparse

from embedgate.api.cli.main import add_settings_flags, settings_from_args


def parse(argv, monkeypatch=None):
    parser = argparse.ArgumentParser()
    add_settings_flags(parser)
    return settings_from_args(parser.parse_args(argv))


def test_every_setting_has_a_flag():
    from embedgate.api.settings import Settings

    parser = argparse.ArgumentParser()
    add_settings_flags(parser)
    dests = {action.dest for action in parser._actions}
    assert set(Settings.model_fields) <= dests


def test_flags_override_environment(monkeypatch):
    monkeypatch.setenv("EMBEDGATE_MAX_BATCH_SIZE", "8")
    monkeypatch.setenv("EMBEDGATE_PORT", "9000")
    settings = parse(["--max-batch-size", "32", "--no-allow-hub-download"])
    assert settings.max_batch_size == 32
    assert settings.port == 9000
    assert settings.allow_hub_download is False


def test_external_triton_url_switches_off_embedded_mode():
    assert parse([]).embedded
    assert not parse(["--triton-url", "triton:8000"]).embedded


def test_preload_models_from_environment_is_a_comma_list(monkeypatch):
    monkeypatch.setenv("EMBEDGATE_PRELOAD_MODELS", "a/b, c")
    assert parse([]).preload_models == ["a/b", "c"]


# --- the client commands, against the app with fake parts (tests/api/conftest.py) ---

import json  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import embedgate.api.cli.main as cli  # noqa: E402
from embedgate.api.cli.client import EmbedgateClient  # noqa: E402
from tests.api.conftest import FakeModel  # noqa: E402


@pytest.fixture
def run(client, monkeypatch, capsys):
    """``run(*argv)`` -> (exit code, stdout, stderr), the commands talking to the fake app."""
    seen = {}

    def connect(url, api_key, timeout):
        seen.update(url=url, api_key=api_key)
        return EmbedgateClient(url, api_key, timeout, http=client)

    monkeypatch.setattr(cli, "EmbedgateClient", connect)

    def invoke(*argv):
        code = cli.main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    invoke.seen = seen
    return invoke


def test_embed_prints_one_json_array_per_text(run, gateway):
    code, out, err = run("embed", "org/loaded", "first text", "second text", "--no-normalize", "--timings")
    assert code == 0, err
    np.testing.assert_array_equal([json.loads(line) for line in out.splitlines()], [[0, 1, 2], [3, 4, 5]])
    assert gateway.embeddings.calls == [("org/loaded", ["first text", "second text"], False)]
    for timing in ("x-queue-time-ms=", "x-tokenize-time-ms=", "x-inference-time-ms=", "x-total-time-ms="):
        assert timing in err


RERANKER = {
    "kind": "cross_encoder", "embedding_dim": 1,
    "cross_encoder": {"num_labels": 1, "activation": "torch.nn.modules.linear.Identity", "token_type_ids": False},
}


def test_embed_with_a_prompt_in_a_precision(run, gateway):
    gateway.registry.changes = {"org/loaded": {"prompts": {"query": "query: "}}}
    code, out, err = run("embed", "org/loaded", "a text", "--prompt-name", "query", "--precision", "ubinary")
    assert code == 0, err
    # The fake's vector [0, 1, 2] has two dimensions above zero: bits 0b01100000.
    assert [json.loads(line) for line in out.splitlines()] == [[96]]
    assert gateway.embeddings.calls == [("org/loaded", ["query: a text"], True)]


def test_rerank_prints_the_best_first(run, gateway):
    gateway.registry.changes = {"org/loaded": RERANKER}
    code, out, err = run("rerank", "org/loaded", "q", "short", "the longest one", "middle", "--top-n", "2")
    assert code == 0, err
    assert [line.split("\t") for line in out.splitlines()] == [
        ["15.000000", "1", "the longest one"], ["6.000000", "2", "middle"]
    ]


def test_models_as_a_table_and_as_json(run, gateway):
    gateway.registry.loaded_names = {"org/loaded", "other/model"}
    code, out, _ = run("models")
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split() == ["MODEL", "PRETRAINED", "KIND", "DIM", "MAX_LEN", "FORM", "LOADED"]
    assert sorted(row.split()[0] for row in rows) == ["org/loaded", "other/model"]
    code, out, _ = run("models", "--json")
    assert {m["model_name"] for m in json.loads(out)} == {"org/loaded", "other/model"}


def test_load_shows_the_servers_progress_then_prints_the_result(run, gateway):
    async def load_sentence_transformer(
        name, model_path=None, *, trust_remote_code=False, revision=None, on_source_change="convert", progress=None
    ):
        progress.converter_line("[  1.5s] exporting ONNX (opset 17)")
        progress.step("loading into Triton")
        return SimpleNamespace(model=FakeModel(name), already_loaded=False, converted=True)

    gateway.registry.load_sentence_transformer = load_sentence_transformer
    code, out, err = run("load", "org/new", "--api-key", "k-123")
    assert code == 0, err
    assert json.loads(out)["status"] == "loaded"
    progress = err.splitlines()
    assert [line.split("] ", 1)[1] for line in progress] == ["exporting ONNX (opset 17)", "loading into Triton"]
    assert all(line.startswith("[") and "s] " in line for line in progress)
    assert run.seen["api_key"] == "k-123"


def test_server_errors_exit_1_with_status_code_and_message(run, gateway):
    code, out, err = run("embed", "org/nothing", "a")
    assert (code, out) == (1, "")
    assert "404 model_not_found" in err and "load it first" in err

    async def fails(
        name, model_path=None, *, trust_remote_code=False, revision=None, on_source_change="convert", progress=None
    ):
        from embedgate.api.errors import ModelNotFound

        raise ModelNotFound(f"model '{name}' could not be found")

    gateway.registry.load_sentence_transformer = fails
    code, out, err = run("load", "org/absent")
    assert code == 1 and "404 model_not_found: model 'org/absent' could not be found" in err


def test_refuse_source_change_asks_the_server_for_a_409_rather_than_a_conversion(run, gateway):
    asked = []

    async def refuses(
        name, model_path=None, *, trust_remote_code=False, revision=None, on_source_change="convert", progress=None
    ):
        from embedgate.api.errors import SourceChanged

        asked.append(on_source_change)
        raise SourceChanged(f"model '{name}' in the repository was converted from directory /a ...")

    gateway.registry.load_sentence_transformer = refuses
    code, _, err = run("load", "org/m", "--model-path", "/srv", "--refuse-source-change")
    assert code == 1 and "409 source_changed" in err
    run("load", "org/m", "--model-path", "/srv")
    assert asked == ["refuse", "convert"]


def test_revision_asks_the_server_for_the_hubs_revision(run, gateway):
    asked = []

    async def load_sentence_transformer(
        name, model_path=None, *, trust_remote_code=False, revision=None, on_source_change="convert", progress=None
    ):
        asked.append(revision)
        progress.converter_line('[  0.2s] downloading org/m: 1 of 2 files, 5 B of 9 B\t{"download": {"files_done": 1}}')
        return SimpleNamespace(model=FakeModel(name), already_loaded=False, converted=True)

    gateway.registry.load_sentence_transformer = load_sentence_transformer
    code, _, err = run("load", "org/m", "--revision", "v1.0")
    assert code == 0, err
    run("load", "org/m")
    assert asked == ["v1.0", None]
    # A download's step shows its words: the files and bytes done.
    assert err.splitlines()[0].endswith("] downloading org/m: 1 of 2 files, 5 B of 9 B")


def test_unload_prints_the_servers_message(run, gateway):
    code, out, _ = run("unload", "org/loaded")
    assert code == 0 and out.strip() == "Model org/loaded unloaded."
    assert gateway.registry.unloaded == ["org/loaded"]


def test_an_unreachable_server_is_a_one_line_error(capsys):
    code = cli.main(["models", "--url", "http://127.0.0.1:9"])
    assert code == 1
    assert "could not talk to http://127.0.0.1:9" in capsys.readouterr().err


def test_the_url_and_key_come_from_the_environment(monkeypatch, run):
    monkeypatch.setenv("EMBEDGATE_URL", "http://example.invalid:1")
    monkeypatch.setenv("EMBEDGATE_API_KEY", "from-env")
    run("models")
    assert run.seen == {"url": "http://example.invalid:1", "api_key": "from-env"}


def test_bench_hands_every_following_argument_to_the_benchmark(monkeypatch):
    import embedgate.bench.cli

    received = []
    monkeypatch.setattr(embedgate.bench.cli, "main", lambda argv: received.append(argv))
    argv = ["--endpoint", "/v1/embeddings", "--concurrency", "8", "--help"]
    assert cli.main(["bench", *argv]) == 0
    assert received == [argv]


def test_pretrained_loads_a_clip_model(run, gateway):
    from embedgate.api.errors import ModelNotFound

    asked = []

    async def load_clip(model_name, pretrained, *, revision=None, on_source_change="convert", progress=None):
        asked.append((model_name, pretrained))
        raise ModelNotFound(f"CLIP model '{model_name}' ({pretrained}) could not be found")

    gateway.registry.load_clip = load_clip
    code, _, err = run("load", "ViT-B-32", "--pretrained", "laion2b_s34b_b79k")
    assert code == 1 and "404 model_not_found" in err
    assert asked == [("ViT-B-32", "laion2b_s34b_b79k")]
