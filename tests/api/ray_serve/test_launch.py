"""What ``embedgate serve --ray`` deploys: a config Serve accepts, settings for the
replicas without secrets, and redeploys that keep the models being served."""

from pathlib import Path

from ray.serve.schema import ServeDeploySchema

from embedgate.api.ray_serve.config_api import ServeConfigApi
from embedgate.api.ray_serve.desired import DesiredModels
from embedgate.api.ray_serve.launch import application_config, deploy, replica_settings
from embedgate.api.settings import Settings

from .fakes import FakeServeApi

OTHER = {"name": "other", "route_prefix": "/other", "import_path": "other:app"}


def test_the_application_config_is_one_serve_accepts():
    settings = Settings(
        ray_replicas=2, ray_max_replicas=6, ray_max_replicas_per_node=1, ray_replica_cpus=2, ray_health_check_period_s=2
    )
    config = application_config(settings, DesiredModels(("m",), 1))
    schema = ServeDeploySchema.model_validate({"applications": [config]})
    (deployment,) = schema.applications[0].deployments
    assert deployment.name == "EmbedGate" and deployment.user_config == {"models": ["m"], "revision": 1}
    assert deployment.autoscaling_config["min_replicas"] == 2
    assert deployment.autoscaling_config["max_replicas"] == 6
    assert deployment.max_ongoing_requests == 256
    assert deployment.ray_actor_options.num_cpus == 2
    assert deployment.health_check_period_s == 2


def test_a_fixed_replica_count_without_autoscaling():
    (deployment,) = application_config(Settings(ray_replicas=3), DesiredModels())["deployments"]
    assert deployment["num_replicas"] == 3 and "autoscaling_config" not in deployment


def test_replicas_get_settings_but_never_keys_or_launcher_options():
    settings = Settings(
        api_keys=["secret-key"], admin_keys=["admin-secret"], port=9000, ray_replicas=4,
        ray_dashboard_url="http://head:8265", model_repository=Path("relative/repo"), max_batch_size=32,
    )
    values = replica_settings(settings)
    assert values["max_batch_size"] == 32
    assert values["ray_dashboard_url"] == "http://head:8265"
    assert values["model_repository"] == str(Path("relative/repo").resolve())
    assert not {"api_keys", "admin_keys", "port", "ray_replicas"} & set(values)
    assert "secret" not in repr(application_config(settings, DesiredModels()))


async def test_a_redeploy_keeps_the_served_models_adds_preloads_and_other_applications():
    running = application_config(Settings(), DesiredModels(("loaded/model",), 5))
    fake = FakeServeApi(running)
    fake.config["applications"].append(OTHER)
    api = ServeConfigApi("http://dashboard:8265", "embedgate", "EmbedGate", transport=fake.transport)
    await deploy(api, Settings(ray_replicas=3, preload_models=["new/model"]))
    (put,) = fake.puts
    ServeDeploySchema.model_validate(put)
    assert put["applications"][0] == OTHER
    (deployment,) = put["applications"][1]["deployments"]
    assert deployment["num_replicas"] == 3
    assert deployment["user_config"] == {"models": ["loaded/model", "new/model"], "revision": 6}
