import argparse

from api.cli import add_settings_flags, settings_from_args


def parse(argv, monkeypatch=None):
    parser = argparse.ArgumentParser()
    add_settings_flags(parser)
    return settings_from_args(parser.parse_args(argv))


def test_every_setting_has_a_flag():
    from api.settings import Settings

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
