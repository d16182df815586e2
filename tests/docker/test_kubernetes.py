"""The Helm chart in docker/kubernetes/helm/embedgate, rendered and linted offline by the
Helm SDK (helm-python-sdk, no cluster, no helm binary) and every object it renders
validated strictly against Kubernetes' own schemas (kubernetes-validate). That its pods
run the image docker/Dockerfile builds as that image runs (its user, port, probes and
volumes) is checked against the built image in test_images.py."""

from __future__ import annotations

import base64
import copy
import re
import shutil

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from starlette.testclient import TestClient

from embedgate.api.http.app import create_app
from embedgate.api.settings import Settings

from .manifests import (
    CHART,
    DEFAULTS,
    KUBERNETES_VERSIONS,
    RELEASE,
    REPOSITORY,
    SECRET_VARIABLES,
    as_pod_template,
    containers,
    embedgate,
    env_entries,
    literal_env,
    pod,
    project_version,
    render,
    render_text,
    settings_from,
    unknown_settings,
    validate_strictly,
)

FULLNAME = f"{RELEASE}-embedgate"

# CPU nodes, a fixed number of pods, a CLIP model, an extra setting, no pod scrape.
OVERRIDES = {
    "modelRepository": REPOSITORY,
    "replicaCount": 3,
    "models": ["sentence-transformers/all-MiniLM-L6-v2", "ViT-B-32:laion2b_s34b_b79k"],
    "gpu": {"enabled": False},
    "autoscaling": {"enabled": False},
    "podDisruptionBudget": {"enabled": False},
    "settings": {"EMBEDGATE_MAX_INFLIGHT_REQUESTS": "512"},
    "metrics": {"scrapeAnnotations": False},
}
# Values no manifest may show in plain text.
SENTINELS = {
    "awsAccessKeyId": "AKIAEMBEDGATESENTINEL",
    "awsSecretAccessKey": "sentinel/secret+access+key",
    "apiKeys": "sentinel-api-key",
    "adminKeys": "sentinel-admin-key",
}
CREATED_SECRET = {**DEFAULTS, "credentials": {"create": True, **SENTINELS}}

VALUE_SETS = {"defaults": DEFAULTS, "overrides": OVERRIDES, "created-secret": CREATED_SECRET}


def port_number(container: dict, name: str) -> int:
    return next(p["containerPort"] for p in container["ports"] if p["name"] == name)


@pytest.fixture(scope="module", params=list(VALUE_SETS))
def rendered(request) -> dict[str, dict]:
    return render(VALUE_SETS[request.param])


def test_every_rendered_object_is_valid_kubernetes(rendered):
    assert {"Deployment", "Service", "ServiceAccount", "NetworkPolicy"} <= set(rendered)
    for obj in rendered.values():
        validate_strictly(obj)


def test_strict_validation_rejects_a_misspelt_field():
    deployment = copy.deepcopy(render(DEFAULTS)["Deployment"])
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_strictly(deployment)


def test_pinned_versions_start_at_the_charts_minimum():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    minimum = re.match(r">=(\d+\.\d+)", chart["kubeVersion"]).group(1)
    assert KUBERNETES_VERSIONS[0].startswith(minimum + ".")
    assert chart["appVersion"] == project_version()


@pytest.mark.parametrize("values", list(VALUE_SETS))
def test_chart_lints_clean(values):
    report = helm.lint(CHART, VALUE_SETS[values], strict=True, kube_version=f"v{KUBERNETES_VERSIONS[-1]}")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and problems == [], report


def test_lint_reports_a_broken_template(tmp_path):
    broken = shutil.copytree(CHART, tmp_path / "embedgate")
    service = broken / "templates" / "service.yaml"
    service.write_text(service.read_text().replace("{{ .Values.service.type }}", "{{ .Values.service.type "))
    report = helm.lint(broken, DEFAULTS, strict=True)
    assert report["errors"], report


def test_values_are_checked_against_the_charts_schema():
    with pytest.raises(helm.HelmValuesError, match="replicaCont"):
        render({**DEFAULTS, "replicaCont": 3})
    with pytest.raises(helm.HelmValuesError, match="modelRepository"):
        render({"modelRepository": "/srv/model_repository"})


def test_the_model_repository_is_required():
    with pytest.raises(helm.HelmRenderError, match="modelRepository is required"):
        render({})


def test_one_container_of_the_image_per_pod(rendered):
    spec = pod(rendered)
    assert [c["name"] for c in spec["containers"]] == ["embedgate"] and "initContainers" not in spec
    # The image's own entrypoint: the gateway, which starts the Triton it embeds.
    assert "command" not in embedgate(rendered) and "args" not in embedgate(rendered)


def test_the_pod_serves_the_repository_with_its_embedded_triton(rendered, monkeypatch):
    settings = settings_from(literal_env(embedgate(rendered)), monkeypatch)
    assert settings.embedded and settings.triton_form == "python"
    assert settings.model_repository == REPOSITORY


def test_the_pods_cache_and_shared_memory_are_volumes(rendered):
    spec = pod(rendered)
    mounts = {m["name"]: m["mountPath"] for m in embedgate(rendered)["volumeMounts"]}
    volumes = {v["name"]: v["emptyDir"] for v in spec["volumes"]}
    assert mounts == {"cache": "/home/embedgate/.cache", "shm": "/dev/shm"}
    assert volumes["shm"]["medium"] == "Memory" and volumes["shm"]["sizeLimit"]
    assert volumes["cache"]["sizeLimit"]


@pytest.fixture(scope="module")
def gateway_app() -> TestClient:
    """The gateway's app with keys set and no Triton behind it (its lifespan never runs)."""
    return TestClient(create_app(Settings(api_keys=["user-key"], admin_keys=["admin-key"])))


def test_probes_point_at_real_endpoints(rendered, gateway_app):
    container = embedgate(rendered)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = container[probe]["httpGet"]
        assert get["port"] in {p["name"] for p in container["ports"]}, probe
        # Probes carry no key: the path must exist and answer without one.
        assert gateway_app.get(get["path"]).status_code not in (401, 403, 404), probe
    assert gateway_app.get(container["livenessProbe"]["httpGet"]["path"]).json() == {"status": "live"}
    # Ready means Triton ready and the models loaded: here, with no gateway started, 503.
    assert gateway_app.get(container["readinessProbe"]["httpGet"]["path"]).status_code == 503


def test_ports_agree(rendered):
    container, service = embedgate(rendered), rendered["Service"]["spec"]
    [service_port] = service["ports"]
    assert service_port["targetPort"] == "http"
    assert port_number(container, "http") == int(literal_env(container)["EMBEDGATE_PORT"]) == service_port["port"]
    # The gateway's port alone: Triton's listen on the pod's loopback.
    admitted = {p["port"] for rule in rendered["NetworkPolicy"]["spec"]["ingress"] for p in rule["ports"]}
    assert admitted == {port_number(container, "http")}


def test_prometheus_scrapes_the_gateway_without_a_key(monkeypatch):
    objects = render(DEFAULTS)
    annotations = objects["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    container = embedgate(objects)
    assert annotations["prometheus.io/port"] == str(port_number(container, "http"))
    settings = settings_from({**literal_env(container), "EMBEDGATE_API_KEYS": "user-key"}, monkeypatch)
    app = TestClient(create_app(settings))
    # No Triton behind it here: not 401, so the scrape reaches the handler.
    assert app.get(annotations["prometheus.io/path"]).status_code not in (401, 403, 404)
    assert app.get("/metrics").status_code == 401
    # Without the annotations, the metrics keep their key.
    unscraped = render(OVERRIDES)
    assert "EMBEDGATE_PROMETHEUS_WITHOUT_KEY" not in literal_env(embedgate(unscraped))


def test_selectors_agree(rendered):
    deployment = rendered["Deployment"]["spec"]
    labels = deployment["template"]["metadata"]["labels"]
    selectors = [deployment["selector"]["matchLabels"], rendered["Service"]["spec"]["selector"]]
    selectors.append(rendered["NetworkPolicy"]["spec"]["podSelector"]["matchLabels"])
    if "PodDisruptionBudget" in rendered:
        selectors.append(rendered["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"])
    for selector in selectors:
        assert selector.items() <= labels.items()
    assert pod(rendered)["serviceAccountName"] == rendered["ServiceAccount"]["metadata"]["name"]


def test_every_embedgate_variable_is_a_setting(rendered):
    names = {entry["name"] for entry in env_entries(pod(rendered))}
    assert {"EMBEDGATE_MODEL_REPOSITORY", "EMBEDGATE_PRELOAD_MODELS", "EMBEDGATE_INSTANCE_KIND"} <= names
    assert unknown_settings(names) == set()


def test_the_pods_environment_makes_valid_settings(monkeypatch):
    settings = settings_from(literal_env(embedgate(render(OVERRIDES))), monkeypatch)
    assert settings.embedded and settings.instance_kind == "cpu"
    assert settings.preload_models == OVERRIDES["models"]
    assert settings.max_inflight_requests == 512


def test_gpu_only_when_enabled():
    for values, kind, gpus in ((DEFAULTS, "gpu", {"nvidia.com/gpu": 1}), (OVERRIDES, "cpu", {})):
        container = embedgate(render(values))
        limits = container["resources"].get("limits", {})
        assert {k: v for k, v in limits.items() if k.startswith("nvidia.com/")} == gpus
        assert literal_env(container)["EMBEDGATE_INSTANCE_KIND"] == kind


def test_no_credential_is_written_in_a_pod(rendered):
    secret_name = FULLNAME
    read = {}
    for entry in env_entries(pod(rendered)):
        if entry["name"] in SECRET_VARIABLES or entry["name"].startswith("AWS_"):
            assert "value" not in entry, entry["name"]
            ref = entry["valueFrom"]["secretKeyRef"]
            assert ref["name"] == secret_name and ref["key"] == entry["name"]
            read[entry["name"]] = read.get(entry["name"], 0) + 1
    assert read == {
        "AWS_ACCESS_KEY_ID": 1, "AWS_SECRET_ACCESS_KEY": 1, "AWS_DEFAULT_REGION": 1,
        "EMBEDGATE_API_KEYS": 1, "EMBEDGATE_ADMIN_KEYS": 1,
    }


def test_a_created_secret_is_the_only_place_credentials_live():
    texts = render_text(CREATED_SECRET)
    objects = render(CREATED_SECRET)
    for value in SENTINELS.values():
        assert all(value not in text for text in texts.values())
        encoded = base64.b64encode(value.encode()).decode()
        holders = [name for name, text in texts.items() if encoded in text]
        assert holders == ["embedgate/templates/secret.yaml"]
    assert objects["Secret"]["metadata"]["name"] == FULLNAME
    # A changed Secret rolls the pods.
    assert "checksum/secret" in objects["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert "Secret" not in render(DEFAULTS)


def test_an_existing_secret_is_referenced_by_name():
    spec = pod(render({**DEFAULTS, "credentials": {"existingSecret": "s3-and-keys"}}))
    refs = {e["valueFrom"]["secretKeyRef"]["name"] for e in env_entries(spec) if "valueFrom" in e}
    assert refs == {"s3-and-keys"}
    with pytest.raises(helm.HelmRenderError, match="either existingSecret or create"):
        render({**CREATED_SECRET, "credentials": {**CREATED_SECRET["credentials"], "existingSecret": "s3-and-keys"}})


def test_the_autoscaler_scales_on_triton_queue_time():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    objects = render(DEFAULTS)
    hpa = objects["HorizontalPodAutoscaler"]["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": objects["Deployment"]["metadata"]["name"]}
    [metric] = hpa["metrics"]
    name = values["autoscaling"]["queueTime"]["metricName"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == name
    assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": values["autoscaling"]["queueTime"]["targetAverageValue"]}
    # The HPA owns the replica count while it runs.
    assert "replicas" not in objects["Deployment"]["spec"]
    # The prometheus-adapter rule that serves the metric, in values.yaml and the chart's
    # README alike: Triton's queue-time counter over its request counter, per pod.
    for document in ((CHART / "values.yaml").read_text(), (CHART / "README.md").read_text()):
        [rule] = yaml.safe_load(adapter_rule(document))
        assert rule["name"]["as"] == name
        assert rule["resources"]["overrides"]["pod"] == {"resource": "pod"}
        assert "nv_inference_queue_duration_us" in rule["seriesQuery"]
        assert "rate(nv_inference_queue_duration_us" in rule["metricsQuery"]
        assert "rate(nv_inference_request_success" in rule["metricsQuery"]


def adapter_rule(document: str) -> str:
    """The YAML block of the adapter rule: from its seriesQuery line to the end of its
    metricsQuery, comment markers and indentation taken off."""
    lines = document.splitlines()
    start = next(i for i, line in enumerate(lines) if "- seriesQuery:" in line)
    indent = lines[start].index("- seriesQuery:")
    block = []
    for line in lines[start:]:
        text = line[indent:] if len(line) > indent else ""
        if block and (not text.strip() or not (text.startswith("  ") or text.startswith("- "))):
            break
        block.append(text)
    return "\n".join(block)


def test_without_the_autoscaler_the_deployment_sets_its_replicas():
    objects = render(OVERRIDES)
    assert "HorizontalPodAutoscaler" not in objects and "PodDisruptionBudget" not in objects
    assert objects["Deployment"]["spec"]["replicas"] == 3


def test_the_image_is_the_one_the_docs_build():
    image = embedgate(render(DEFAULTS))["image"]
    assert image == f"embedgate:{project_version()}"
    readme = (CHART / "README.md").read_text()
    assert f"docker build -f docker/Dockerfile -t {image} ." in readme


def test_pod_template_validation_rejects_an_unknown_field():
    template = copy.deepcopy(render(DEFAULTS)["Deployment"]["spec"]["template"])
    validate_strictly(as_pod_template("embedgate", template))
    template["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_strictly(as_pod_template("embedgate", template))
