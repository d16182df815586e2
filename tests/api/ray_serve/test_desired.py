import pytest

from embedgate.api.errors import InvalidModelName
from embedgate.api.ray_serve.desired import DesiredModels, adding, removing


def test_user_config_round_trips_and_drops_duplicates():
    desired = DesiredModels.from_user_config({"models": ["a/b", "ViT-B-32:laion2b_s34b_b79k", "a/b"], "revision": 4})
    assert desired.models == ("a/b", "ViT-B-32:laion2b_s34b_b79k")
    assert DesiredModels.from_user_config(desired.user_config()) == desired


def test_empty_config_wants_nothing():
    assert DesiredModels.from_user_config(None) == DesiredModels()
    assert DesiredModels.from_user_config({}) == DesiredModels()


@pytest.mark.parametrize(
    "user_config",
    [["a"], {"models": "a"}, {"models": [1]}, {"models": ["a"], "revision": -1}, {"models": ["a"], "revision": "2"}],
)
def test_malformed_configs_are_refused(user_config):
    with pytest.raises(ValueError):
        DesiredModels.from_user_config(user_config)


def test_unsafe_model_names_are_refused():
    with pytest.raises(InvalidModelName):
        DesiredModels.from_user_config({"models": ["../etc"]})


def test_every_change_is_a_new_revision_even_when_nothing_changes():
    desired = DesiredModels(("a",), 3)
    assert desired.changed(adding("b")) == DesiredModels(("a", "b"), 4)
    assert desired.changed(adding("a")) == DesiredModels(("a",), 4)
    assert desired.changed(removing("a")) == DesiredModels((), 4)
