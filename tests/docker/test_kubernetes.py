"""The Helm chart in docker/kubernetes/helm/embedgate, rendered and linted offline by the
Helm SDK (helm-python-sdk, no cluster, no helm binary) and every object it renders
validated strictly against Kubernetes' own schemas (kubernetes-validate)."""

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
    DOCKER,
    KUBERNETES_VERSIONS,
    SECRET_VARIABLES,
    as_pod_template,
    containers,
    env_entries,
    literal_env,
    project_version,
    settings_from,
    unknown_settings,
    validate_strictly,
)

CHART = DOCKER / "kubernetes" / "helm" / "embedgate"
REPOSITORY = "s3://minio.storage.svc.cluster.local:9000/embedgate/model_repository"
RELEASE = "search"
FULLNAME = f"{RELEASE}-embedgate"

# The chart as most will install it: defaults plus the one required value.
DEFAULTS = {"modelRepository": REPOSITORY}
# CPU-only Triton, a fixed number of pods, a CLIP model, an extra gateway setting.
OVERRIDES = {
    "modelRepository": REPOSITORY,
    "replicaCount": 3,
    "models": ["sentence-transformers/all-MiniLM-L6-v2", "ViT-B-32:laion2b_s34b_b79k"],
    "triton": {"gpu": {"enabled": False}},
    "autoscaling": {"enabled": False},
    "podDisruptionBudget": {"enabled": False},
    "gateway": {"settings": {"EMBEDGATE_MAX_INFLIGHT_REQUESTS": "512"}},
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


def triton_flags(objects: dict) -> dict[str, str]:
    command = containers(pod(objects))["triton"]["command"]
    assert command[0] == "tritonserver"
    pairs = (arg.removeprefix("--").partition("=") for arg in command[1:])
    return {name: value if equals else "true" for name, equals, value in pairs}


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


def test_one_gateway_and_one_triton_per_pod(rendered):
    spec = pod(rendered)
    assert [c["name"] for c in spec["containers"]] == ["gateway"]
    # Triton is a native sidecar: an init container that keeps running.
    assert [(c["name"], c.get("restartPolicy")) for c in spec["initContainers"]] == [("triton", "Always")]
    assert containers(spec)["gateway"]["command"] == ["embedgate", "serve"]


def test_triton_reads_the_repository_the_gateway_writes(rendered):
    flags = triton_flags(rendered)
    gateway = literal_env(containers(pod(rendered))["gateway"])
    assert flags["model-repository"] == gateway["EMBEDGATE_MODEL_REPOSITORY"] == REPOSITORY
    assert flags["model-control-mode"] == "explicit"
    assert flags["disable-auto-complete-config"] == "true"
    assert flags["strict-readiness"] == "true"


def test_the_gateway_reaches_triton_inside_the_pod(rendered):
    flags, spec = triton_flags(rendered), pod(rendered)
    triton, gateway = containers(spec)["triton"], literal_env(containers(spec)["gateway"])
    assert gateway["EMBEDGATE_TRITON_URL"] == f"127.0.0.1:{flags['http-port']}"
    assert gateway["EMBEDGATE_TRITON_GRPC_URL"] == f"127.0.0.1:{flags['grpc-port']}"
    assert flags["grpc-address"] == "127.0.0.1"
    assert gateway["EMBEDGATE_TRITON_METRICS_URL"] == f"http://127.0.0.1:{flags['metrics-port']}/metrics"
    assert port_number(triton, "triton-http") == int(flags["http-port"])
    assert port_number(triton, "triton-metrics") == int(flags["metrics-port"])


@pytest.fixture(scope="module")
def gateway_app() -> TestClient:
    """The gateway's app with keys set and no Triton behind it (its lifespan never runs)."""
    return TestClient(create_app(Settings(api_keys=["user-key"], admin_keys=["admin-key"])))


def test_probes_point_at_real_endpoints(rendered, gateway_app):
    spec = pod(rendered)
    triton_paths = {"/v2/health/ready", "/v2/health/live"}  # KServe v2, Triton's own
    for name, container in containers(spec).items():
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            get = container[probe]["httpGet"]
            assert get["port"] in {p["name"] for p in container["ports"]}, (name, probe)
            if name == "triton":
                assert get["path"] in triton_paths, probe
            else:
                # Probes carry no key: the path must exist and answer without one.
                assert gateway_app.get(get["path"]).status_code not in (401, 403, 404), probe
    gateway, triton = containers(spec)["gateway"], containers(spec)["triton"]
    assert gateway_app.get(gateway["livenessProbe"]["httpGet"]["path"]).json() == {"status": "live"}
    # Ready means Triton ready and the models loaded: here, with no gateway started, 503.
    assert gateway_app.get(gateway["readinessProbe"]["httpGet"]["path"]).status_code == 503
    assert triton["readinessProbe"]["httpGet"]["path"] == triton["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert triton["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"


def test_ports_agree(rendered):
    spec, service = pod(rendered), rendered["Service"]["spec"]
    gateway = containers(spec)["gateway"]
    flags = triton_flags(rendered)
    [service_port] = service["ports"]
    assert service_port["targetPort"] == "http"
    assert port_number(gateway, "http") == int(literal_env(gateway)["EMBEDGATE_PORT"]) == service_port["port"]
    assert literal_env(gateway)["EMBEDGATE_HOST"] == "0.0.0.0"
    # Only the gateway's port and Triton's read-only metrics: never its control API.
    admitted = {p["port"] for rule in rendered["NetworkPolicy"]["spec"]["ingress"] for p in rule["ports"]}
    assert admitted == {port_number(gateway, "http"), int(flags["metrics-port"])}
    assert int(flags["http-port"]) not in admitted and int(flags["grpc-port"]) not in admitted
    annotations = rendered["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == flags["metrics-port"]


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
    assert {"EMBEDGATE_MODEL_REPOSITORY", "EMBEDGATE_TRITON_URL", "EMBEDGATE_PRELOAD_MODELS"} <= names
    assert unknown_settings(names) == set()


def test_the_gateways_environment_makes_valid_settings(monkeypatch):
    gateway = containers(pod(render(OVERRIDES)))["gateway"]
    settings = settings_from(literal_env(gateway), monkeypatch)
    assert not settings.embedded
    assert settings.triton_form == "onnxruntime" and settings.instance_kind == "cpu"
    assert settings.preload_models == OVERRIDES["models"]
    assert settings.max_inflight_requests == 512


def test_gpu_only_when_enabled():
    for values, kind, gpus in ((DEFAULTS, "gpu", {"nvidia.com/gpu": 1}), (OVERRIDES, "cpu", {})):
        spec = pod(render(values))
        triton, gateway = containers(spec)["triton"], containers(spec)["gateway"]
        limits = triton["resources"].get("limits", {})
        assert {k: v for k, v in limits.items() if k.startswith("nvidia.com/")} == gpus
        assert "nvidia.com/gpu" not in gateway["resources"].get("limits", {})
        assert literal_env(gateway)["EMBEDGATE_INSTANCE_KIND"] == kind


def test_no_credential_is_written_in_a_pod(rendered):
    secret_name = FULLNAME
    read = {}
    for entry in env_entries(pod(rendered)):
        if entry["name"] in SECRET_VARIABLES or entry["name"].startswith("AWS_"):
            assert "value" not in entry, entry["name"]
            ref = entry["valueFrom"]["secretKeyRef"]
            assert ref["name"] == secret_name and ref["key"] == entry["name"]
            read[entry["name"]] = read.get(entry["name"], 0) + 1
    # Both containers reach S3; only the gateway checks API keys.
    assert read == {
        "AWS_ACCESS_KEY_ID": 2, "AWS_SECRET_ACCESS_KEY": 2, "AWS_DEFAULT_REGION": 2,
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


def test_images_match_the_repositorys_dockerfile():
    spec = pod(render(DEFAULTS))
    dockerfile = (DOCKER / "Dockerfile").read_text()
    triton_image = re.search(r"^ARG TRITON_IMAGE=(\S+)$", dockerfile, flags=re.M).group(1)
    # The gateway image is built FROM that Triton: the two agree on Triton's version.
    assert containers(spec)["triton"]["image"] == triton_image
    assert containers(spec)["gateway"]["image"] == f"embedgate-gpu:{project_version()}"


def test_pod_template_validation_rejects_an_unknown_field():
    template = copy.deepcopy(render(DEFAULTS)["Deployment"]["spec"]["template"])
    validate_strictly(as_pod_template("embedgate", template))
    template["spec"]["initContainers"][0]["restartPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_strictly(as_pod_template("embedgate", template))
