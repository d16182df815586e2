import pytest

from embedgate.api.errors import InvalidModelName
from embedgate.api.models.names import from_triton_name, is_triton_name, to_triton_name


@pytest.mark.parametrize(
    "name, triton_name",
    [
        ("sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers--all-MiniLM-L6-v2"),
        ("intfloat/e5-small-v2", "intfloat--e5-small-v2"),
        ("all-MiniLM-L6-v2", "all-MiniLM-L6-v2"),
        ("my_model.v1", "my_model.v1"),
    ],
)
def test_names_map_to_triton_names_and_back(name, triton_name):
    assert to_triton_name(name) == triton_name
    assert from_triton_name(triton_name) == name
    assert is_triton_name(triton_name)


@pytest.mark.parametrize(
    "name",
    [
        "",
        "../etc/passwd",
        "/etc/passwd",
        "a/../../b",
        "org/name/extra",
        "a--b",
        "a..b",
        ".hidden",
        "trailing.",
        "with space",
        "semi;colon",
        "percent%2F",
        "back\\slash",
        "nul\x00byte",
        "newline\n",  # a $ anchor would let it through
        "ünicode",
        "a" * 97,
        "org/",
    ],
)
def test_unsafe_names_are_refused(name):
    with pytest.raises(InvalidModelName):
        to_triton_name(name)


def test_mapping_is_injective_where_underscores_would_collide():
    # With a plain '/' -> '_' mapping these two would share one directory.
    assert to_triton_name("a_b/c") != to_triton_name("a/b_c")
