"""A replica's cluster logic with fakes: reconciling its registry to the desired state,
and waiting for every replica to report a change."""

from dataclasses import dataclass

import httpx
import pytest

from embedgate.api.errors import ClusterConfigError, DeadlineExceeded, ModelNotLoaded, TritonUnavailable
from embedgate.api.ray_serve import cluster as cluster_module
from embedgate.api.ray_serve.cluster import ClusterModels, ReplicaLoadFailed, ServeCluster
from embedgate.api.ray_serve.config_api import ServeConfigApi
from embedgate.api.ray_serve.desired import DesiredModels

from .fakes import FakeBoard, FakeServeApi

APP = {"name": "embedgate", "import_path": "embedgate.api.ray_serve.app:build",
       "deployments": [{"name": "EmbedGate", "user_config": {"models": [], "revision": 0}}]}


@dataclass
class Model:
    name: str


class FakeRegistry:
    def __init__(self, loaded=(), failing=(), triton_down_for=0):
        self.models = {name: Model(name) for name in loaded}
        self.failing = set(failing)
        self.unloaded = []
        self.triton_down_for = triton_down_for  # loads that meet Triton down
        self.tries = 0
        self.refreshed = []

    def loaded(self):
        return list(self.models.values())

    async def restore(self, key):
        self.tries += 1
        if self.tries <= self.triton_down_for:
            raise TritonUnavailable("the inference server is unavailable; retry shortly")
        if key in self.failing:
            raise ModelNotLoaded(f"no room for {key}")
        self.models[key] = Model(key)

    async def refresh(self, key):
        self.refreshed.append(key)

    async def unload(self, name, pretrained=None):
        key = name if pretrained is None else f"{name}:{pretrained}"
        self.unloaded.append(key)
        del self.models[key]

    def served(self, name, pretrained=None):
        raise ModelNotLoaded(f"model '{name}' is not loaded")


def make_cluster(replicas, timeout_s=5.0):
    fake = FakeServeApi(APP, replicas=replicas)
    api = ServeConfigApi("http://dashboard:8265", "embedgate", "EmbedGate", transport=fake.transport)
    board = FakeBoard()
    return ServeCluster(api, "me", "10.0.0.1", converge_timeout_s=timeout_s, board=board), board, fake


def replica(replica_id, state="RUNNING"):
    return {"replica_id": replica_id, "node_ip": f"10.0.0.{len(replica_id)}", "state": state}


async def test_reconcile_loads_what_is_wanted_unloads_the_rest_and_reports_failures():
    cluster, board, _ = make_cluster([])
    registry = FakeRegistry(loaded=["old", "ViT-B-32:openai"], failing=["broken"])
    await cluster.reconcile(registry, DesiredModels(("old", "new", "broken"), 7))
    assert sorted(registry.models) == ["new", "old"]
    assert registry.unloaded == ["ViT-B-32:openai"]
    report = board.reports_by_replica["me"]
    assert report["revision"] == 7 and report["models"] == ["new", "old"]
    assert report["failed"] == {"broken": "no room for broken"}
    # A wanted model it serves already is served as the repository holds it now (another
    # replica may have converted it again from a changed source).
    assert registry.refreshed == ["old"]


async def test_a_load_that_meets_triton_down_is_tried_again_until_triton_is_back(monkeypatch):
    monkeypatch.setattr(cluster_module, "RETRY_S", 0)
    cluster, board, _ = make_cluster([])
    registry = FakeRegistry(triton_down_for=2)
    await cluster.reconcile(registry, DesiredModels(("wanted",), 3))
    assert registry.tries == 3 and sorted(registry.models) == ["wanted"]
    assert board.reports_by_replica["me"]["failed"] == {}


async def test_a_triton_down_past_the_deadline_is_reported_as_a_failed_load(monkeypatch):
    monkeypatch.setattr(cluster_module, "RETRY_S", 0.01)
    cluster, board, _ = make_cluster([], timeout_s=0.05)
    registry = FakeRegistry(triton_down_for=10**6)
    await cluster.reconcile(registry, DesiredModels(("wanted",), 3))
    assert registry.tries > 1 and registry.models == {}
    assert board.reports_by_replica["me"]["failed"] == {"wanted": "the inference server is unavailable; retry shortly"}


async def test_converge_waits_for_every_serving_replica_but_not_for_one_still_starting(monkeypatch):
    monkeypatch.setattr(cluster_module, "POLL_S", 0.01)
    cluster, board, _ = make_cluster([replica("a"), replica("bb", "UPDATING"), replica("ccc", "STARTING")])
    board.reports_by_replica["a"] = {"revision": 3, "models": ["m"], "failed": {}}
    board.reports_by_replica["bb"] = {"revision": 2, "models": [], "failed": {}}
    with pytest.raises(DeadlineExceeded, match="bb"):
        cluster.converge_timeout_s = 0.1
        await cluster.converge("m", True, 3)
    board.reports_by_replica["bb"] = {"revision": 3, "models": ["m"], "failed": {}}
    await cluster.converge("m", True, 3)


async def test_a_replica_that_failed_to_load_is_named():
    cluster, board, _ = make_cluster([replica("a"), replica("bb")])
    board.reports_by_replica["a"] = {"revision": 3, "models": ["m"], "failed": {}}
    board.reports_by_replica["bb"] = {"revision": 3, "models": [], "failed": {"m": "out of memory"}}
    with pytest.raises(ReplicaLoadFailed, match=r"replica bb on 10\.0\.0\.2 could not load 'm': out of memory"):
        await cluster.converge("m", True, 3)


async def test_an_unload_waits_until_no_replica_serves_the_model(monkeypatch):
    monkeypatch.setattr(cluster_module, "POLL_S", 0.01)
    cluster, board, _ = make_cluster([replica("a")], timeout_s=0.1)
    board.reports_by_replica["a"] = {"revision": 5, "models": ["m"], "failed": {}}
    with pytest.raises(DeadlineExceeded, match="did not unload 'm'"):
        await cluster.converge("m", False, 5)
    board.reports_by_replica["a"] = {"revision": 5, "models": [], "failed": {}}
    await cluster.converge("m", False, 5)


async def test_unloading_a_model_no_replica_serves_is_the_single_gateway_error():
    cluster, _, fake = make_cluster([replica("a")])
    with pytest.raises(ModelNotLoaded):
        await ClusterModels(FakeRegistry(), cluster).unload("nowhere")
    assert fake.puts == []  # the desired state is left alone


@dataclass
class Outcome:
    model: Model
    already_loaded: bool
    converted: bool = False


class LoadingRegistry(FakeRegistry):
    """A registry whose loads load here, as the replica that takes a load request does."""

    async def load_sentence_transformer(self, name, model_path=None, **options):
        already = name in self.models
        self.models[name] = Model(name)
        return Outcome(self.models[name], already)

    async def load_clip(self, model_name, pretrained, **options):
        key = f"{model_name}:{pretrained}"
        already = key in self.models
        self.models[key] = Model(key)
        return Outcome(self.models[key], already)


def unreachable(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


@pytest.mark.parametrize("load", ["sentence_transformer", "clip"])
async def test_a_load_that_cannot_become_desired_state_leaves_this_replica_not_serving_it(load):
    # Serve's config API unreachable (a dashboard on another port than the one replicas
    # were told): the load is a 502, and the replica that took it serves nothing more.
    api = ServeConfigApi("http://dashboard:8265", "embedgate", "EmbedGate", transport=httpx.MockTransport(unreachable))
    cluster = ServeCluster(api, "me", "10.0.0.1", converge_timeout_s=1.0, board=FakeBoard())
    registry = LoadingRegistry(loaded=["kept"])
    models = ClusterModels(registry, cluster)
    with pytest.raises(ClusterConfigError, match="unreachable"):
        if load == "clip":
            await models.load_clip("ViT-B-32", "openai")
        else:
            await models.load_sentence_transformer("org/new")
    assert sorted(registry.models) == ["kept"]
    # A model this replica served already (the cluster wants it) is left as it was.
    with pytest.raises(ClusterConfigError):
        await models.load_sentence_transformer("kept")
    assert sorted(registry.models) == ["kept"]
