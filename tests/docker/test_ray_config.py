"""The Ray Serve deployment on paper: docker/ray/serve.yaml (serve run / serve deploy),
the KubeRay RayService in docker/kubernetes/rayservice.yaml and the image of
docker/Dockerfile.ray, checked offline with Ray's own config schema and Kubernetes'
schemas. Nothing here starts Ray."""

from __future__ import annotations

import importlib.metadata
import math
import re
import tomllib

import pytest
import ray
import yaml
from ray.serve import Application

from embedgate.api.ray_serve.app import build
from embedgate.api.ray_serve.desired import DesiredModels

from .manifests import (
    DOCKER,
    ROOT,
    SECRET_VARIABLES,
    as_pod_template,
    check_serve_config,
    containers,
    env_entries,
    project_version,
    settings_from,
    unknown_settings,
    validate_strictly,
)

SERVE_YAML = DOCKER / "ray" / "serve.yaml"
RAYSERVICE_YAML = DOCKER / "kubernetes" / "rayservice.yaml"
DOCKERFILE = DOCKER / "Dockerfile.ray"


def rayservice() -> dict:
    return yaml.safe_load(RAYSERVICE_YAML.read_text())


def serve_configs() -> dict[str, dict]:
    return {
        "serve.yaml": yaml.safe_load(SERVE_YAML.read_text()),
        "rayservice.yaml": yaml.safe_load(rayservice()["spec"]["serveConfigV2"]),
    }


def application(config: dict) -> dict:
    [app] = config["applications"]
    return app


def deployment(config: dict) -> dict:
    [only] = application(config)["deployments"]
    return only


def pod_templates() -> dict[str, dict]:
    cluster = rayservice()["spec"]["rayClusterConfig"]
    templates = {"head": cluster["headGroupSpec"]["template"]}
    templates.update({group["groupName"]: group["template"] for group in cluster["workerGroupSpecs"]})
    return templates


@pytest.fixture(params=["serve.yaml", "rayservice.yaml"])
def config(request) -> dict:
    return serve_configs()[request.param]


def test_serve_configs_pass_rays_schema_with_no_unknown_key(config):
    assert check_serve_config(config) == []


def test_a_misspelt_option_is_caught(config):
    deployment(config)["autoscaling_config"]["target_ongoing_request"] = 8
    deployment(config)["max_ongoing_request"] = 8
    assert sorted(check_serve_config(config)) == [
        "applications.0.deployments.0.autoscaling_config.target_ongoing_request",
        "applications.0.deployments.0.max_ongoing_request",
    ]


def test_the_import_path_builds_the_application(config, monkeypatch):
    app = application(config)
    assert app["import_path"] == "embedgate.api.ray_serve.app:build"
    assert (app["name"], app["route_prefix"]) == ("embedgate", "/")
    # The settings the replicas will read, in the environment the builder reads them from.
    for name, value in app["runtime_env"]["env_vars"].items():
        monkeypatch.setenv(name, value)
    assert isinstance(build(app.get("args", {})), Application)
    assert deployment(config)["name"] == "EmbedGate"


def test_user_config_is_a_valid_desired_state(config):
    desired = DesiredModels.from_user_config(deployment(config)["user_config"])
    assert desired.models == ("sentence-transformers/all-MiniLM-L6-v2",)


def test_the_rayservice_runs_the_application_of_serve_yaml():
    local, cluster = serve_configs()["serve.yaml"], serve_configs()["rayservice.yaml"]
    same = ("name", "route_prefix", "import_path", "args")
    assert {k: application(local)[k] for k in same} == {k: application(cluster)[k] for k in same}
    assert application(local)["runtime_env"]["env_vars"].keys() == application(cluster)["runtime_env"]["env_vars"].keys()
    for option in ("name", "user_config", "max_ongoing_requests", "max_queued_requests", "graceful_shutdown_timeout_s"):
        assert deployment(local)[option] == deployment(cluster)[option], option
    # On Kubernetes the proxies must be reachable from the Service.
    assert local["http_options"]["host"] == "127.0.0.1" and cluster["http_options"]["host"] == "0.0.0.0"


def test_every_embedgate_variable_is_a_setting(config, monkeypatch):
    env = application(config)["runtime_env"]["env_vars"]
    assert unknown_settings(env) == set()
    settings = settings_from(env, monkeypatch)
    assert str(settings.model_repository).startswith("s3:/")
    assert settings.triton_form == "python" and settings.embedded


def test_each_replica_reserves_the_cores_its_triton_uses(config, monkeypatch):
    settings = settings_from(application(config)["runtime_env"]["env_vars"], monkeypatch)
    assert settings.instance_count >= 1 and settings.ort_intra_op_threads >= 1
    cores = settings.instance_count * settings.ort_intra_op_threads
    assert deployment(config)["ray_actor_options"]["num_cpus"] == cores


def test_ray_lets_triton_batch(config, monkeypatch):
    settings = settings_from(application(config)["runtime_env"]["env_vars"], monkeypatch)
    options = deployment(config)
    # Serve hands a replica every request its gateway would admit (Ray's default is 5).
    assert options["max_ongoing_requests"] >= settings.max_inflight_requests
    autoscaling = options["autoscaling_config"]
    # Serve adds a replica before one is full.
    assert autoscaling["target_ongoing_requests"] < options["max_ongoing_requests"]
    assert 1 <= autoscaling["min_replicas"] < autoscaling["max_replicas"]


def test_no_credential_in_the_serve_configs(config):
    env = application(config)["runtime_env"]["env_vars"]
    assert not [name for name in env if name.startswith("AWS_") or name in SECRET_VARIABLES]


def test_rayservice_pod_templates_are_valid_kubernetes():
    for group, template in pod_templates().items():
        validate_strictly(as_pod_template(f"embedgate-{group}", template))


def test_rayservice_reads_credentials_from_a_secret():
    for template in pod_templates().values():
        for entry in env_entries(template["spec"]):
            assert unknown_settings([entry["name"]]) == set()
            if entry["name"].startswith("AWS_") or entry["name"] in SECRET_VARIABLES:
                assert "value" not in entry and entry["valueFrom"]["secretKeyRef"]["key"] == entry["name"]
    [workers] = [t for g, t in pod_templates().items() if g != "head"]
    names = {entry["name"] for entry in env_entries(workers["spec"])}
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"} <= names


def test_rayservice_cluster_fits_the_serve_autoscaler():
    resource = rayservice()
    assert (resource["apiVersion"], resource["kind"]) == ("ray.io/v1", "RayService")
    cluster = resource["spec"]["rayClusterConfig"]
    assert cluster["enableInTreeAutoscaling"] is True
    # No replica on the head: it keeps the Serve controller and a proxy.
    assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    [group] = cluster["workerGroupSpecs"]
    assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
    [worker] = group["template"]["spec"]["containers"]
    cpus = float(worker["resources"]["limits"]["cpu"])
    options = deployment(serve_configs()["rayservice.yaml"])
    per_pod = math.floor(cpus / options["ray_actor_options"]["num_cpus"])
    assert per_pod >= 1
    assert options["autoscaling_config"]["max_replicas"] <= group["maxReplicas"] * per_pod
    assert options["autoscaling_config"]["min_replicas"] <= group["minReplicas"] * per_pod


def test_serve_port_is_open_on_every_ray_pod():
    port = serve_configs()["rayservice.yaml"]["http_options"]["port"]
    for group, template in pod_templates().items():
        [container] = containers(template["spec"]).values()
        assert {"name": "serve", "containerPort": port} in container["ports"], group


def dockerfile_arg(name: str, dockerfile=DOCKERFILE) -> str:
    return re.search(rf"^ARG {name}=(\S+)$", dockerfile.read_text(), flags=re.M).group(1)


def test_one_ray_version_everywhere():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["ray"] == [f"ray[serve]=={ray.__version__}"]
    assert rayservice()["spec"]["rayClusterConfig"]["rayVersion"] == ray.__version__
    # The Ray image installs the package's `ray` extra: Ray's version is the extra's (and the
    # `grpc` extra, for TEI's gRPC API on the replicas).
    assert '-c constraints.txt ".[ray,grpc]"' in DOCKERFILE.read_text()
    assert importlib.metadata.version("ray") == ray.__version__


def test_the_ray_image_is_built_as_the_rayservice_pulls_it():
    text = DOCKERFILE.read_text()
    tag = f"embedgate-ray:{project_version()}"
    assert f"docker build -f docker/Dockerfile.ray -t {tag} ." in text
    for template in pod_templates().values():
        assert [c["image"] for c in template["spec"]["containers"]] == [tag]
    # On the embedgate image, as its docs build it.
    base = dockerfile_arg("BASE")
    assert base == f"embedgate:{project_version()}"
    assert f"docker build -f docker/Dockerfile -t {base} ." in text
    assert not re.search(r"^ENV .*EMBEDGATE_", text, flags=re.M)
