"""EMBEDGATE_KEY_NAMES: name=key pairs for configured keys, refused (never repeating a key)
when malformed, naming an unknown key, or repeating a name or a key."""

import pytest
from pydantic import ValidationError

from embedgate.api.settings import Settings


def test_names_are_read_by_key():
    settings = Settings(api_keys="k-a,k=b", admin_keys="k-admin", key_names="team-a=k-a, ops = k-admin,b=k=b")
    assert settings.key_name_map() == {"k-a": "team-a", "k-admin": "ops", "k=b": "b"}


@pytest.mark.parametrize(
    ("names", "says"),
    [
        ("team-a", "must be name=key"),
        ("te am=k-a", "must be name=key"),
        ("team-a=unknown-secret", "not an API or admin key"),
        ("a=k-a,a=k-b", "repeats"),
        ("a=k-a,b=k-a", "repeats"),
    ],
)
def test_bad_names_are_refused_without_repeating_a_key(names, says):
    with pytest.raises(ValidationError) as refused:
        Settings(api_keys="k-a,k-b", key_names=names)
    assert says in str(refused.value)
    assert "unknown-secret" not in str(refused.value) and "k-a" not in str(refused.value)
