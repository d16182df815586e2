"""Reading and checking the deployment manifests offline: Kubernetes objects strictly
against the API's own schemas, pod specs' containers and environment, and Ray Serve
configs against Ray's schema."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path

import helm_python as helm
import kubernetes_validate
import yaml
from pydantic import BaseModel
from ray.serve.config import AutoscalingConfig
from ray.serve.schema import ServeDeploySchema

from embedgate.api.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
CHART = DOCKER / "kubernetes" / "helm" / "embedgate"
REPOSITORY = "s3://minio.storage.svc.cluster.local:9000/embedgate/model_repository"
RELEASE = "search"
# The chart as most will install it: defaults plus the one required value.
DEFAULTS = {"modelRepository": REPOSITORY}

# The oldest Kubernetes the chart supports (Chart.yaml's kubeVersion) and a current one;
# kubernetes-validate ships the schemas of both.
KUBERNETES_VERSIONS = ("1.29.0", "1.33.0")

# Environment variables that carry secrets: only ever read from a Secret.
SECRET_VARIABLES = {
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "EMBEDGATE_API_KEYS",
    "EMBEDGATE_ADMIN_KEYS",
}


def project_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def render_text(values: dict) -> dict[str, str]:
    with helm.Chart.load(CHART) as chart:
        return chart.render(values=values, name=RELEASE, namespace="embeddings")


def render(values: dict) -> dict[str, dict]:
    """The rendered objects by kind (the chart renders at most one of each)."""
    objects = {}
    for name, text in render_text(values).items():
        if name.endswith("NOTES.txt"):
            continue
        for obj in yaml.safe_load_all(text):
            if obj:
                assert obj["kind"] not in objects, f"two {obj['kind']} objects"
                objects[obj["kind"]] = obj
    return objects


def pod(objects: dict) -> dict:
    return objects["Deployment"]["spec"]["template"]["spec"]


def embedgate(objects: dict) -> dict:
    return containers(pod(objects))["embedgate"]


def validate_strictly(obj: dict) -> None:
    """Raise kubernetes_validate.ValidationError unless ``obj`` is valid, with no field
    the API does not know, at every pinned Kubernetes version."""
    for version in KUBERNETES_VERSIONS:
        kubernetes_validate.validate(obj, version, strict=True)


def as_pod_template(name: str, template: dict) -> dict:
    """A pod template from a custom resource, as the core object that holds one."""
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name}, "template": template}


def containers(pod_spec: dict) -> dict[str, dict]:
    """Every container of a pod, init containers included."""
    every = pod_spec.get("initContainers", []) + pod_spec["containers"]
    return {c["name"]: c for c in every}


def env_entries(pod_spec: dict) -> Iterator[dict]:
    for container in containers(pod_spec).values():
        yield from container.get("env", [])


def literal_env(container: dict) -> dict[str, str]:
    """The variables a container sets to a value written in the manifest."""
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def unknown_settings(names) -> set[str]:
    """EMBEDGATE_* names that are no setting of api/settings/."""
    fields = set(Settings.model_fields)
    return {n for n in names if n.startswith("EMBEDGATE_") and n.removeprefix("EMBEDGATE_").lower() not in fields}


def settings_from(env: dict[str, str], monkeypatch) -> Settings:
    """The Settings a gateway would build from these variables (and nothing else)."""
    for name in list(Settings.model_fields):
        monkeypatch.delenv(f"EMBEDGATE_{name.upper()}", raising=False)
    for name, value in env.items():
        if name.startswith("EMBEDGATE_"):
            monkeypatch.setenv(name, value)
    return Settings()


def check_serve_config(config: dict) -> list[str]:
    """Validate a Serve config file as ``serve deploy`` would (raises on a wrong value)
    and return the keys that Ray would silently ignore."""
    parsed = ServeDeploySchema.model_validate(config)
    unknown = unknown_keys(config, parsed)
    # Deployments keep autoscaling_config as a plain dict: check it on its own.
    for a, app in enumerate(config["applications"]):
        for d, deployment in enumerate(app.get("deployments", [])):
            if "autoscaling_config" in deployment:
                given = deployment["autoscaling_config"]
                prefix = f"applications.{a}.deployments.{d}.autoscaling_config."
                unknown += [prefix + key for key in unknown_keys(given, AutoscalingConfig.model_validate(given))]
    return unknown


def unknown_keys(data: dict, model: BaseModel) -> list[str]:
    """Keys of ``data`` that ``model`` (parsed from it) dropped: Ray's schemas ignore
    fields they do not know, so a misspelt option would pass silently."""
    return _unknown(data, model.model_dump(exclude_unset=True), "")


def _unknown(given, kept, path: str) -> list[str]:
    if isinstance(given, dict) and isinstance(kept, dict):
        missing = [f"{path}{key}" for key in given if key not in kept]
        nested = [_unknown(value, kept[key], f"{path}{key}.") for key, value in given.items() if key in kept]
        return missing + [key for keys in nested for key in keys]
    if isinstance(given, list) and isinstance(kept, list):
        nested = [_unknown(g, k, f"{path}{i}.") for i, (g, k) in enumerate(zip(given, kept))]
        return [key for keys in nested for key in keys]
    return []
