"""The images a user deploys, built from ``docker/Dockerfile`` and ``docker/Dockerfile.ray``
and run on this machine (``images.py``: buildah, a Debian base made by debootstrap).

The embedgate image starts as ``docker run`` starts it (its entrypoint, its user, its
environment, the models volume), serves MiniLM at parity with the library, passes its own
health check and stops on SIGTERM leaving no process behind. The Ray image, built on it,
runs a one-node Ray cluster that ``docker/ray/serve.yaml`` is deployed to, as KubeRay
deploys the RayService's, and answers an embedding at parity.
"""

from __future__ import annotations

import os
import secrets
import tomllib
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import cosine_rows, free_port
from tests.integration.conftest import MINILM, wait_until

from .images import ROOT, Container, Images, require_tools
from .manifests import DEFAULTS, DOCKER, containers, embedgate, pod, render

# The image holds the CUDA build of torch (PyPI's for x86_64: the GPU runtime comes with it)
# and everything the converter imports; past this, something that should not be in it is.
MAX_IMAGE_BYTES = 8_000_000_000
TEXTS = [f"an image serves this sentence, number {secrets.token_hex(4)}", "a second one, of other length and words"]


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    require_tools()
    built = Images(prefix=f"embedgate-{os.getpid()}", work=tmp_path_factory.mktemp("images"))
    try:
        yield built
    finally:
        built.remove()


@pytest.fixture(scope="module")
def embedgate_image(images) -> str:
    return images.build("docker/Dockerfile", "embedgate", BASE=images.debian_base())


@pytest.fixture(scope="module")
def ray_image(images, embedgate_image) -> str:
    return images.build("docker/Dockerfile.ray", "ray", BASE=embedgate_image)


def entrypoint(config: dict) -> list[str]:
    return [*(config.get("Entrypoint") or []), *(config.get("Cmd") or [])]


def served_embeddings(url: str, texts: list[str], model: str = MINILM) -> np.ndarray:
    answer = httpx.post(f"{url}/infer", json={"model_name": model, "text": texts}, timeout=120)
    assert answer.status_code == 200, answer.text
    assert answer.headers.get("x-cached-inputs", "0") == "0"
    return np.array(answer.json()["text_embeddings"])


@pytest.fixture(scope="module")
def gateway(images, embedgate_image, tmp_path_factory):
    """The image's entrypoint, as ``docker run -p PORT:8686 -v models:/models`` starts it:
    only the port differs (this machine's network is the container's)."""
    models = tmp_path_factory.mktemp("models")
    os.chown(models, 1000, 1000)
    port = free_port()
    container = Container(
        embedgate_image, entrypoint(images.config(embedgate_image)), images.work / "embedgate.log",
        env={"EMBEDGATE_PORT": str(port)}, volumes={models: "/models"},
    )
    container.url, container.port, container.models = f"http://127.0.0.1:{port}", port, models
    try:
        yield container
    finally:
        container.remove()


def in_flight(url: str) -> float:
    text = httpx.get(f"{url}/metrics/prometheus", timeout=5).text
    return sum(sample.value for family in text_string_to_metric_families(text)
               if family.name == "embedgate_inflight_requests" for sample in family.samples)


def ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_image_runs_the_gateway_as_a_user_with_the_models_on_a_volume(images, embedgate_image):
    config = images.config(embedgate_image)
    assert config["User"] == "1000:1000"
    assert entrypoint(config) == ["tini", "--", "embedgate", "serve"]
    assert set(config["ExposedPorts"]) == {"8686/tcp"}
    assert set(config["Volumes"]) == {"/models"}
    env = dict(entry.split("=", 1) for entry in config["Env"])
    assert env["EMBEDGATE_MODEL_REPOSITORY"] == "/models" and env["EMBEDGATE_PORT"] == "8686"
    assert env["EMBEDGATE_HOST"] == "0.0.0.0"
    assert "/health/ready" in " ".join(config["Healthcheck"]["Test"])


def test_the_image_size(images, embedgate_image):
    size = images.size(embedgate_image)
    print(f"\n{embedgate_image}: {size / 1e9:.2f} GB")
    assert size < MAX_IMAGE_BYTES


def test_the_image_holds_no_sources_or_build_caches(gateway):
    listing = gateway.exec("sh", "-c", "ls -d /src /tmp/uv /root/.cache/uv /opt/embedgate/lib/python3.*/site-packages/uv 2>&1",
                           user="0:0")
    assert listing.stdout.count("No such file") == 4, listing.stdout


def test_the_gateway_serves_minilm_at_parity_with_the_library(gateway, minilm):
    wait_until(lambda: ready(gateway.url), 120, "the container's gateway to be ready")
    loaded = httpx.post(f"{gateway.url}/load_sentence_transformer_model", json={"model_name": MINILM}, timeout=600)
    assert loaded.status_code == 200, loaded.text + gateway.log()
    served = served_embeddings(gateway.url, TEXTS)
    assert cosine_rows(served, minilm.encode(TEXTS)).min() > 0.9999


def test_the_model_is_written_to_the_volume_by_the_images_user(gateway):
    published = [path for path in gateway.models.iterdir() if path.is_dir()]
    assert published, "nothing was written to the models volume"
    assert {path.stat().st_uid for path in published} == {1000}


def test_the_images_health_check_passes(images, embedgate_image, gateway):
    wait_until(lambda: ready(gateway.url), 120, "the container's gateway to be ready")
    test = images.config(embedgate_image)["Healthcheck"]["Test"]
    assert test[0] == "CMD"
    checked = gateway.exec(*test[1:], env={"EMBEDGATE_PORT": str(gateway.port)})
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_chart_runs_the_image_as_it_was_built(images, embedgate_image, gateway):
    """The Helm chart's pod: the image's user, port, health check and its user's cache."""
    config, objects = images.config(embedgate_image), render(DEFAULTS)
    spec, container = pod(objects), embedgate(objects)
    user, group = (int(part) for part in config["User"].split(":"))
    assert (spec["securityContext"]["runAsUser"], spec["securityContext"]["runAsGroup"]) == (user, group)
    image_env = dict(entry.split("=", 1) for entry in config["Env"])
    chart_env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert chart_env["EMBEDGATE_PORT"] == image_env["EMBEDGATE_PORT"]
    assert {f"{p['containerPort']}/tcp" for p in container["ports"]} == set(config["ExposedPorts"])
    assert container["readinessProbe"]["httpGet"]["path"] in " ".join(config["Healthcheck"]["Test"])
    home = gateway.exec("python3", "-c", "import pathlib; print(pathlib.Path.home())").stdout.strip()
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["cache"] == f"{home}/.cache"


def test_the_rayservice_runs_the_ray_image_as_it_was_built(images, ray_image):
    config = images.config(ray_image)
    rayservice = yaml.safe_load((DOCKER / "kubernetes" / "rayservice.yaml").read_text())["spec"]
    port = yaml.safe_load(rayservice["serveConfigV2"])["http_options"]["port"]
    assert f"{port}/tcp" in config["ExposedPorts"]
    cluster = rayservice["rayClusterConfig"]
    for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        [container] = containers(group["template"]["spec"]).values()
        # KubeRay runs its own `ray start`: the image must not need its entrypoint for it.
        assert "command" not in container and "args" not in container


def test_a_stop_drains_and_leaves_no_process(gateway):
    """``docker stop``: SIGTERM to PID 1 (tini), which hands it to the gateway; the gateway
    drains, stops its tritonserver and its stubs and exits; nothing of the container is left."""
    triton = [pid for pid, argv in gateway.processes() if argv and argv[0].endswith("tritonserver")]
    stubs = [pid for pid, argv in gateway.processes() if argv and argv[0].endswith("triton_python_backend_stub")]
    assert triton and stubs, gateway.processes()
    shm_prefix = next(arg.split("=")[-1] for pid, argv in gateway.processes() if pid in triton for arg in argv
                      if "shm-region-prefix-name" in arg)

    texts = [f"drained before the stop, sentence {i} of {secrets.token_hex(4)}" for i in range(512)]
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(httpx.post, f"{gateway.url}/infer", json={"model_name": MINILM, "text": texts}, timeout=120)
        wait_until(lambda: in_flight(gateway.url) > 0, 60, "the request to be in flight")
        code = gateway.stop()
        assert answer.result().status_code == 200 and len(answer.result().json()["text_embeddings"]) == len(texts)

    # uvicorn raises the signal again once it has shut down: 128 + SIGTERM, as Docker shows it.
    assert code == 143, gateway.log()
    assert "Application shutdown complete." in gateway.log()
    assert gateway.processes() == []
    assert not [name for name in os.listdir("/dev/shm") if name.startswith(shm_prefix)]
    assert "Traceback" not in gateway.log()


@pytest.fixture(scope="module")
def ray_node(images, ray_image, moto_server, tmp_path_factory):
    """The Ray image's own command (``ray start --head --block``), on ports of its own:
    a one-node Ray cluster, as KubeRay starts a head pod. Its replicas read the S3
    credentials from the node's environment, as the RayService's pods get them."""
    config_dir = tmp_path_factory.mktemp("ray-config")
    os.chmod(config_dir, 0o755)
    bucket = moto_server.new_bucket()
    ports = {name: free_port() for name in ("gcs", "dashboard", "client", "agent", "serve")}
    command = [*entrypoint(images.config(ray_image)), f"--port={ports['gcs']}", f"--dashboard-port={ports['dashboard']}",
               f"--ray-client-server-port={ports['client']}", f"--dashboard-agent-listen-port={ports['agent']}",
               "--num-cpus=2", "--disable-usage-stats"]
    # On SIGTERM Ray drains the node before it stops (30 s by default): a one-node cluster
    # has nowhere to move its work to.
    env = {**bucket.env, "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "2"}
    node = Container(ray_image, command, images.work / "ray.log", env=env, volumes={config_dir: "/config"})
    node.dashboard = f"http://127.0.0.1:{ports['dashboard']}"
    node.serve_url, node.serve_port, node.bucket, node.config_dir = f"http://127.0.0.1:{ports['serve']}", ports["serve"], bucket, config_dir
    try:
        yield node
    finally:
        node.remove()


def test_the_ray_image_is_the_embedgate_image_with_the_extras_ray(images, ray_image, embedgate_image, ray_node):
    assert images.layers(ray_image)[: len(images.layers(embedgate_image))] == images.layers(embedgate_image)
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["ray"]
    version = ray_node.exec("python3", "-c", "import ray; print(ray.__version__)")
    assert extra == [f"ray[serve]=={version.stdout.strip()}"]
    # KubeRay's probes run wget in the Ray containers, and it starts Ray from a login shell.
    assert ray_node.exec("wget", "--version").returncode == 0
    assert ray_node.exec("bash", "-lc", "ray --version").returncode == 0


def test_serve_yaml_deployed_on_the_ray_image_answers_at_parity(ray_node, minilm):
    """docker/ray/serve.yaml as it is, but for what this machine must differ in: the
    proxy's port, the bucket's URL, and one replica (the node has two cores)."""
    config = yaml.safe_load((ROOT / "docker" / "ray" / "serve.yaml").read_text())
    config["http_options"]["port"] = ray_node.serve_port
    [app] = config["applications"]
    app["runtime_env"]["env_vars"]["EMBEDGATE_MODEL_REPOSITORY"] = ray_node.bucket.url
    [deployment] = app["deployments"]
    deployment["autoscaling_config"].update(min_replicas=1, max_replicas=1)
    (ray_node.config_dir / "serve.yaml").write_text(yaml.safe_dump(config))
    os.chmod(ray_node.config_dir / "serve.yaml", 0o644)

    wait_until(lambda: dashboard_up(ray_node.dashboard), 120, "the Ray node's dashboard")
    deployed = ray_node.exec("serve", "deploy", "--address", ray_node.dashboard, "/config/serve.yaml", timeout=180)
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr

    wait_until(lambda: answers(ray_node.serve_url), 600, "the Serve application to answer", interval=1)
    served = served_embeddings(ray_node.serve_url, TEXTS[::-1])
    assert cosine_rows(served, minilm.encode(TEXTS[::-1])).min() > 0.9999
    # Converted once, into the bucket the RayService's replicas share.
    assert any(key.endswith("metadata.json") for key in ray_node.bucket.keys())


def test_the_ray_node_stops_on_sigterm(ray_node):
    """``docker stop``: Ray drains the node and stops every process of it."""
    ray_node.stop()
    wait_until(lambda: ray_node.processes() == [], 30, "every process of the Ray node to exit")


def dashboard_up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/api/version", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health/ready", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False
