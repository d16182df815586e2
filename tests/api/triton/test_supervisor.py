import logging
from pathlib import Path

import pytest

from embedgate.api.settings import Settings
from embedgate.api.triton.bundle import PreparedTriton
from embedgate.api.triton.command import Ports, build_command, log_level


def command(**overrides):
    prepared = PreparedTriton(
        binary=Path("/w/bin/tritonserver"),
        backend_dir=Path("/w/backends"),
        cache_dir=Path("/w/caches"),
        env={},
        version="0.7.0",
    )
    return build_command(
        prepared, Path("/repo"), Ports(8000, 8001, 8002), "embedgate_1_x_", Settings(**overrides)
    )


def flags(cmd):
    """Each ``--name=value`` as name: value, a bare switch as name: "true"."""
    pairs = (arg[2:].partition("=") for arg in cmd[1:] if not arg.startswith("--backend-config="))
    return {name: value if equals else "true" for name, equals, value in pairs}


def backend_config(cmd) -> list[str]:
    return [arg.split("=", 1)[1] for arg in cmd if arg.startswith("--backend-config=")]


def test_every_triton_endpoint_is_bound_to_loopback():
    f = flags(command())
    assert f["http-address"] == f["grpc-address"] == f["metrics-address"] == "127.0.0.1"
    assert (f["http-port"], f["grpc-port"], f["metrics-port"]) == ("8000", "8001", "8002")


def test_models_are_loaded_only_on_request():
    f = flags(command())
    assert f["model-control-mode"] == "explicit"
    assert f["model-repository"] == "/repo"


def test_configs_are_served_as_written_with_no_stub_started_to_complete_them():
    assert flags(command())["disable-auto-complete-config"] == "true"


def test_python_backend_uses_this_runs_shared_memory_prefix_and_waits_for_slow_stubs():
    assert backend_config(command(triton_stub_timeout_s=90)) == [
        "python,shm-region-prefix-name=embedgate_1_x_", "python,stub-timeout-seconds=90"
    ]
    assert flags(command())["backend-directory"] == "/w/backends"


def test_exit_timeout_follows_settings():
    assert flags(command(triton_exit_timeout_s=3))["exit-timeout-secs"] == "3"


@pytest.mark.parametrize(
    "line, level",
    [
        ('E1124 14:10:12.1 1 model.cc:1] "failed to load"', logging.WARNING),
        ('W1124 14:10:12.1 1 model_lifecycle.cc:111] "ignore version directory"', logging.INFO),
        ('I1124 14:10:12.1 1 model_lifecycle.cc:472] "loading: m:1"', logging.DEBUG),
        ("| Option                           | Value |", logging.DEBUG),
        ("error: creating server: Internal - failed to read the repository", logging.ERROR),
        ("Signal (6) received.", logging.ERROR),
        ("terminate called after throwing an instance of 'std::runtime_error'", logging.ERROR),
        ('W1124 14:10:12.1 1 CudaDriverHelper.cc:1] "no driver"', logging.DEBUG),
    ],
)
def test_triton_output_is_logged_by_what_it_says(line, level):
    assert log_level(line) == level
