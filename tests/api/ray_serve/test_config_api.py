"""ServeConfigApi against a fake of Serve's config API."""

import pytest

from embedgate.api.ray_serve.config_api import ClusterConfigError, ServeConfigApi

from .fakes import FakeServeApi

APP = {"name": "embedgate", "route_prefix": "/", "import_path": "embedgate.api.ray_serve.app:build",
       "deployments": [{"name": "EmbedGate", "num_replicas": 2, "user_config": {"models": ["a"], "revision": 1}}]}
OTHER = {"name": "other", "route_prefix": "/other", "import_path": "other:app"}


def api_for(fake: FakeServeApi) -> ServeConfigApi:
    return ServeConfigApi("http://dashboard:8265", "embedgate", "EmbedGate", transport=fake.transport)


async def test_a_change_keeps_everything_else_in_the_config():
    fake = FakeServeApi(APP)
    fake.config["applications"].append(OTHER)
    desired = await api_for(fake).change_models(lambda models: [*models, "b"])
    assert desired.models == ("a", "b") and desired.revision == 2
    (put,) = fake.puts
    assert put["applications"][1] == OTHER
    assert put["http_options"] == {"host": "0.0.0.0", "port": 8000}
    assert put["applications"][0]["deployments"][0]["num_replicas"] == 2


async def test_a_change_overwritten_by_another_writer_is_applied_again_on_top_of_it():
    fake = FakeServeApi(APP)
    theirs = {**APP, "deployments": [{"name": "EmbedGate", "user_config": {"models": ["a", "c"], "revision": 2}}]}
    fake.overwrites.append({"applications": [theirs]})
    desired = await api_for(fake).change_models(lambda models: [*models, "b"])
    assert desired.models == ("a", "c", "b") and desired.revision == 3
    assert len(fake.puts) == 2


async def test_an_application_not_deployed_from_a_config_is_a_clear_error():
    fake = FakeServeApi(OTHER)
    with pytest.raises(ClusterConfigError, match="not deployed from a config"):
        await api_for(fake).desired()


async def test_an_unreachable_dashboard_is_a_clear_error():
    api = ServeConfigApi("http://127.0.0.1:9", "embedgate", "EmbedGate", timeout_s=2)
    with pytest.raises(ClusterConfigError, match="unreachable"):
        await api.details()


async def test_replicas_come_from_the_deployment_details():
    fake = FakeServeApi(APP, replicas=[{"replica_id": "r1", "node_ip": "10.0.0.1", "state": "RUNNING"}])
    (replica,) = await api_for(fake).replicas()
    assert (replica.replica_id, replica.node_ip, replica.state) == ("r1", "10.0.0.1", "RUNNING")
