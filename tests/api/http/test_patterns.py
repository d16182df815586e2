"""The OpenAPI name patterns against the server's own checks (api/models/names.py): a name
a pattern allows is never refused, and a name it forbids always is."""

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from embedgate.api.endpoints.schemas import patterns
from embedgate.api.errors import Forbidden, InvalidInput, InvalidModelName, ModelNotFound
from embedgate.api.models.names import clip_triton_name, split_clip_key, to_triton_name
from embedgate.api.models.sources import check_pretrained, check_revision
from embedgate.api.settings import Settings


def schema_regex(pattern: str) -> re.Pattern[str]:
    """The pattern as a JSON Schema validator reads it: ``$`` is the end of the string."""
    assert pattern.endswith("$")
    return re.compile(pattern[:-1] + r"\Z")


def drawn(pattern: str) -> st.SearchStrategy[str]:
    return st.from_regex(schema_regex(pattern))


def accepted(name: str) -> bool:
    try:
        to_triton_name(name)
    except InvalidModelName:
        return False
    return True


def clip_accepted(model_name: str, pretrained: str) -> bool:
    try:
        clip_triton_name(model_name, pretrained)
    except InvalidModelName:
        return False
    return True


# Deterministic, and no example database (nothing written into the checkout).
CHECKS = settings(
    max_examples=300, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
# Names near the edges: the characters names use and those they must not, in any order.
near_names = st.text(alphabet="aZ09._-/@:\n", max_size=24) | st.sampled_from(
    ["a", "a/b", "a@int8", "a@optimized", "a@foo", "a--b", "a..b", "a/b/c", "-a", "a-", "a_", "_a", "a\n", ""]
)


@CHECKS
@given(drawn(patterns.MODEL_NAME))
def test_every_name_the_pattern_allows_is_accepted(name):
    assert accepted(name), name


@CHECKS
@given(near_names)
def test_a_name_the_pattern_forbids_is_refused(name):
    # A trailing newline is the one thing the server lets through that the pattern does not
    # (``$`` in names.py): narrower is safe, so only the other direction is held there.
    if not name.endswith("\n"):
        assert accepted(name) == bool(schema_regex(patterns.MODEL_NAME).match(name)), name


@pytest.mark.parametrize("name", ["a" * 96, f"{'a' * 96}/{'b' * 96}", f"{'a' * 96}/{'b' * 96}@int8"])
def test_longest_names_match(name):
    assert schema_regex(patterns.MODEL_NAME).match(name) and accepted(name)


@pytest.mark.parametrize("name", ["a" * 97, f"{'a' * 97}/b", "a/b/c", "a@int8@int8", "a--b", "a..b", "a-"])
def test_names_over_the_edge_are_refused(name):
    assert not schema_regex(patterns.MODEL_NAME).match(name) and not accepted(name)


@CHECKS
@given(drawn(patterns.CLIP_ARCHITECTURE), drawn(patterns.PRETRAINED) | st.from_regex(r"\A[A-Za-z0-9_]{1,96}\Z"))
def test_every_clip_pair_the_patterns_allow_is_accepted(model_name, pretrained):
    assert clip_accepted(model_name, pretrained), (model_name, pretrained)


def test_the_longest_architecture_with_the_longest_tag_fits():
    assert clip_accepted("a" * patterns.CLIP_ARCHITECTURE_MAX, "b" * 96)
    assert not schema_regex(patterns.CLIP_ARCHITECTURE).match("a" * (patterns.CLIP_ARCHITECTURE_MAX + 1))


@CHECKS
@given(drawn(patterns.OPENAI_MODEL))
def test_every_openai_model_string_the_pattern_allows_is_accepted(model):
    clip = split_clip_key(model)
    assert clip_accepted(*clip) if clip else accepted(model), model


@CHECKS
@given(drawn(patterns.PRETRAINED_TO_LOAD))
def test_a_pretrained_to_load_is_never_refused_as_malformed(pretrained):
    try:
        check_pretrained(Settings(), pretrained)
    except InvalidInput:
        pytest.fail(f"refused as malformed: {pretrained!r}")
    except (ModelNotFound, Forbidden):
        pass  # an absolute path that is not a file: the server's state, not the request's form


@pytest.mark.parametrize("pretrained", ["relative/x.pt", "a/b"])
def test_a_relative_checkpoint_path_is_forbidden_by_both(pretrained):
    assert not schema_regex(patterns.PRETRAINED_TO_LOAD).match(pretrained)
    with pytest.raises(InvalidInput):
        check_pretrained(Settings(), pretrained)


def revision_accepted(revision: str) -> bool:
    try:
        check_revision(revision)
    except InvalidInput:
        return False
    return True


@CHECKS
@given(drawn(patterns.REVISION) | st.text(alphabet="aZ09._-/ \n", max_size=16))
def test_a_revision_is_accepted_exactly_where_the_pattern_allows_it(revision):
    if not revision.endswith("\n"):  # ``$`` in the server's check, as for names
        assert revision_accepted(revision) == bool(schema_regex(patterns.REVISION).match(revision)), revision


@CHECKS
@given(st.from_regex(r"\Ahf-hub:[aZ09._/-]{0,12}\Z") | drawn(patterns.PRETRAINED_TO_LOAD))
def test_a_hub_repository_as_pretrained_is_accepted_exactly_where_the_pattern_allows_it(pretrained):
    if not pretrained.startswith("hf-hub:"):
        return
    try:
        check_pretrained(Settings(), pretrained)
        accepted_there = True
    except InvalidInput:
        accepted_there = False
    assert accepted_there == bool(schema_regex(patterns.PRETRAINED_TO_LOAD).match(pretrained)), pretrained
