import pytest

from embedgate.api.errors import InvalidModelName
from embedgate.api.models.names import clip_key, clip_triton_name, is_triton_name, split_clip_key


def test_tags_keep_the_seed_naming():
    assert clip_triton_name("ViT-B-32", "laion2b_s34b_b79k") == "ViT-B-32_laion2b_s34b_b79k"


@pytest.mark.parametrize(
    "pretrained",
    ["/models/clip/epoch_32.pt", "/tmp/../etc/passwd", "/a b/c;rm -rf.pt", "/x/" + "y" * 300 + ".pt", "..", "a--b"],
)
def test_a_path_becomes_a_safe_slug_with_a_hash(pretrained):
    name = clip_triton_name("ViT-B-32", pretrained)
    assert is_triton_name(name + "_image_encoder")
    assert "/" not in name and ".." not in name and " " not in name
    assert name.startswith("ViT-B-32_")


def test_different_paths_with_one_file_name_get_different_names():
    assert clip_triton_name("RN50", "/a/model.pt") != clip_triton_name("RN50", "/b/model.pt")
    assert clip_triton_name("RN50", "/a/model.pt") == clip_triton_name("RN50", "/a/model.pt")


@pytest.mark.parametrize("model_name", ["org/ViT-B-32", "../x", "hf-hub:timm/x", "", "a--b"])
def test_model_names_are_checked(model_name):
    with pytest.raises(InvalidModelName):
        clip_triton_name(model_name, "tag")


def test_too_long_for_triton_is_refused():
    with pytest.raises(InvalidModelName):
        clip_triton_name("V" * 96, "t" * 96)


def test_keys_split_back_even_when_pretrained_has_colons():
    assert split_clip_key(clip_key("ViT-B-32", "/x:y/z.pt")) == ("ViT-B-32", "/x:y/z.pt")
    assert split_clip_key("sentence-transformers/all-MiniLM-L6-v2") is None
