"""The GPU deployment in ``docker/`` (not built here: no Docker engine, no GPU): its
settings are real settings, its ports agree and stay on loopback, and the model configs
it makes the gateway write are valid native-backend ``ModelConfig``s."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from tritonclient.grpc import model_config_pb2 as pb

from embedgate.api.compute.scheduling.batching import BatchingPolicy
from embedgate.api.settings import Settings
from embedgate.contract.spec import ATTENTION_MASK, EMBEDDING, INPUT_IDS
from embedgate.converters.triton_config import build_text_model_config, parse, render

DOCKER = Path(__file__).resolve().parents[2] / "docker"


def dockerfile_env() -> dict[str, str]:
    text = (DOCKER / "Dockerfile").read_text()
    block = re.search(r"^ENV (.*?)(?<!\\)\n", text, flags=re.S | re.M).group(1)
    pairs = shlex.split(block.replace("\\\n", " "))
    return dict(pair.split("=", 1) for pair in pairs)


def entrypoint_flags() -> dict[str, str]:
    text = (DOCKER / "entrypoint.sh").read_text()
    return {name: value or "true" for name, value in re.findall(r"--([a-z-]+)(?:=(\S+))?", text)}


def test_entrypoint_is_valid_bash():
    subprocess.run(["bash", "-n", str(DOCKER / "entrypoint.sh")], check=True)


def test_every_embedgate_variable_is_a_setting():
    env = {**dockerfile_env(), **yaml.safe_load((DOCKER / "compose.yaml").read_text())["services"]["embedgate"]["environment"]}
    names = {k.removeprefix("EMBEDGATE_").lower() for k in env if k.startswith("EMBEDGATE_")}
    assert names and names <= set(Settings.model_fields), names - set(Settings.model_fields)


def test_triton_listens_on_loopback_where_the_gateway_looks():
    flags, env = entrypoint_flags(), dockerfile_env()
    assert flags["http-address"] == flags["grpc-address"] == flags["metrics-address"] == "127.0.0.1"
    assert env["EMBEDGATE_TRITON_URL"] == f"127.0.0.1:{flags['http-port']}"
    assert env["EMBEDGATE_TRITON_GRPC_URL"] == f"127.0.0.1:{flags['grpc-port']}"
    assert env["EMBEDGATE_TRITON_METRICS_URL"] == f"http://127.0.0.1:{flags['metrics-port']}/metrics"
    assert flags["model-repository"] == '"${EMBEDGATE_MODEL_REPOSITORY}"'
    assert flags["model-control-mode"] == "explicit"
    assert flags["disable-auto-complete-config"] == "true"


def test_only_the_gateway_port_is_published():
    service = yaml.safe_load((DOCKER / "compose.yaml").read_text())["services"]["embedgate"]
    assert service["ports"] == ["8686:8686"]
    assert dockerfile_env()["EMBEDGATE_PORT"] == "8686"


@pytest.fixture
def deployed_settings(monkeypatch, tmp_path) -> Settings:
    """The settings the container's gateway runs with."""
    for name, value in dockerfile_env().items():
        if name.startswith("EMBEDGATE_"):
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("EMBEDGATE_MODEL_REPOSITORY", str(tmp_path))
    return Settings()


def test_the_container_writes_native_gpu_configs_that_parse(deployed_settings):
    options = BatchingPolicy(deployed_settings).triton_options("sentence_transformers")
    config = parse(render(build_text_model_config("org--model", EMBEDDING, 384, options)))

    assert isinstance(config, pb.ModelConfig)
    assert config.platform == "onnxruntime_onnx" and config.backend == ""
    assert [(g.kind, g.count) for g in config.instance_group] == [(pb.ModelInstanceGroup.KIND_GPU, 1)]
    assert [(i.name, list(i.dims), i.allow_ragged_batch) for i in config.input] == [
        (INPUT_IDS, [-1], False),
        (ATTENTION_MASK, [-1], False),
    ]
    assert [(o.name, list(o.dims)) for o in config.output] == [(EMBEDDING, [384])]
    assert config.max_batch_size == deployed_settings.max_batch_size
    assert config.dynamic_batching.max_queue_delay_microseconds == deployed_settings.max_queue_delay_us
