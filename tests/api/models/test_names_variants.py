"""Variant names: '<name>@optimized' and '<name>@int8' map to '<triton name>---<variant>'."""

import pytest

from embedgate.api.errors import InvalidModelName
from embedgate.api.models.names import (
    clip_triton_name,
    from_triton_name,
    split_variant,
    to_triton_name,
    validate_model_name,
)


@pytest.mark.parametrize(
    "name, triton_name",
    [
        ("sentence-transformers/all-MiniLM-L6-v2@int8", "sentence-transformers--all-MiniLM-L6-v2---int8"),
        ("sentence-transformers/all-MiniLM-L6-v2@optimized", "sentence-transformers--all-MiniLM-L6-v2---optimized"),
        ("a/b@int8", "a--b---int8"),
        ("a_@int8", "a_---int8"),
        ("a_/b_@optimized", "a_--b_---optimized"),
        ("x.y@int8", "x.y---int8"),
        ("a-b/c-d@int8", "a-b--c-d---int8"),
    ],
)
def test_variant_names_map_to_triton_names_and_back(name, triton_name):
    assert to_triton_name(name) == triton_name
    assert from_triton_name(triton_name) == name


@pytest.mark.parametrize("name", ["a/b", "a_", "x.y", "a_/b_", "int8", "optimized", "a/int8", "a-int8"])
def test_names_without_a_variant_round_trip_unchanged(name):
    assert from_triton_name(to_triton_name(name)) == name
    assert "---" not in to_triton_name(name)


def test_the_mapping_is_injective_over_names_with_and_without_variants():
    bases = ["a", "a_", "a-b", "a_b", "ab", "a/b", "a_/b", "a/b_", "a_/_b", "x.y", "x/y.z", "int8", "a/int8"]
    names = [base + suffix for base in bases for suffix in ("", "@optimized", "@int8")]
    valid = [name for name in names if _valid(name)]
    assert len(valid) > 30
    triton_names = [to_triton_name(name) for name in valid]
    assert len(set(triton_names)) == len(valid)
    assert [from_triton_name(t) for t in triton_names] == valid
    for name, triton_name in zip(valid, triton_names):
        # '---' appears only as the separator of a variant suffix, once.
        expected = 1 if "@" in name else 0
        assert triton_name.count("---") == expected, triton_name


def _valid(name: str) -> bool:
    try:
        validate_model_name(name)
    except InvalidModelName:
        return False
    return True


def test_split_variant():
    assert split_variant("org/name@int8") == ("org/name", "int8")
    assert split_variant("org/name@optimized") == ("org/name", "optimized")
    assert split_variant("org/name") == ("org/name", None)
    assert split_variant("org/name@fp16") == ("org/name@fp16", None)


@pytest.mark.parametrize(
    "name",
    [
        "a@",
        "@int8",
        "a@int8@int8",
        "a@optimized@int8",
        "a@INT8",
        "a@fp16",
        "a@int8/b",
        "org@int8/name",
        "a--b@int8",
        "a..b@int8",
        "a/@int8",
        "a-@int8",
        "a@int8 ",
        "a@int8\x00",
    ],
)
def test_only_one_known_variant_suffix_is_accepted(name):
    with pytest.raises(InvalidModelName):
        to_triton_name(name)


def test_clip_models_have_no_variants():
    with pytest.raises(InvalidModelName, match="sentence-transformer"):
        clip_triton_name("ViT-B-32@int8", "laion2b_s34b_b79k")
