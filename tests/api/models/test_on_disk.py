"""A model on disk is one directory or several (a CLIP model's two): published, half published,
absent or in conflict."""

import pytest

from embedgate.api.models.on_disk import OnDisk, find_on_disk
from embedgate.api.models.refs import ModelRef
from embedgate.contract.kinds.clip import ClipMetadata, ClipText, ImagePreprocessing
from embedgate.contract.spec import ImageParityResult, ModelMetadata
from tests.api.conftest import fake_metadata


def clip_metadata(model_name: str, pretrained: str) -> ModelMetadata:
    return fake_metadata(model_name).model_copy(
        update={
            "kind": "clip",
            "record": ClipMetadata(
                pretrained=pretrained,
                text=ClipText(context_length=77, sot_token_id=1, eot_token_id=2, word_pattern="x"),
                image=ImagePreprocessing(height=224, width=224, mean=(0.5,) * 3, std=(0.5,) * 3),
                image_parity=ImageParityResult(passed=True, threshold=0.9999, min_cosine=1.0, images=1),
            ),
        }
    )


@pytest.fixture
def repository(tmp_path):
    on_disk = {}

    def put(part: str, metadata: ModelMetadata | None) -> None:
        (tmp_path / part).mkdir()
        on_disk[part] = metadata

    def find(model_name="ViT-B-32", pretrained="tag"):
        return find_on_disk(lambda part: (tmp_path / part).exists(), on_disk.get, ModelRef.named(model_name, pretrained))

    return put, find


def test_absent_and_published(repository):
    put, find = repository
    assert find() == (OnDisk.ABSENT, None)
    metadata = clip_metadata("ViT-B-32", "tag")
    put("ViT-B-32_tag_image_encoder", metadata)
    put("ViT-B-32_tag_text_encoder", metadata)
    assert find() == (OnDisk.PUBLISHED, metadata)


@pytest.mark.parametrize("part", ["ViT-B-32_tag_image_encoder", "ViT-B-32_tag_text_encoder"])
def test_one_part_of_this_model_is_a_half_publish(repository, part):
    put, find = repository
    put(part, clip_metadata("ViT-B-32", "tag"))
    assert find() == (OnDisk.HALF_PUBLISHED, None)


@pytest.mark.parametrize(
    "metadata",
    [None, fake_metadata("ViT-B-32_tag_text_encoder"), clip_metadata("ViT-B-32", "other-tag"), clip_metadata("ViT-B", "32_tag")],
    ids=["not-ours", "a-sentence-transformer", "other-pretrained", "same-name-other-split"],
)
def test_directories_holding_something_else_conflict(repository, metadata):
    put, find = repository
    put("ViT-B-32_tag_text_encoder", metadata)
    put("ViT-B-32_tag_image_encoder", clip_metadata("ViT-B-32", "tag"))
    assert find() == (OnDisk.CONFLICT, None)


def test_a_single_part_model_is_published_or_conflicts(tmp_path):
    on_disk = {}

    def find():
        return find_on_disk(lambda part: part in on_disk, on_disk.get, ModelRef.named("org/model"))

    assert find() == (OnDisk.ABSENT, None)
    on_disk["org--model"] = None  # a directory that is no embedgate model
    assert find() == (OnDisk.CONFLICT, None)
    on_disk["org--model"] = fake_metadata("org/other")
    assert find() == (OnDisk.CONFLICT, None)
    on_disk["org--model"] = metadata = fake_metadata("org/model")
    assert find() == (OnDisk.PUBLISHED, metadata)


def test_a_multimodal_model_is_published_with_its_image_graph(tmp_path):
    from tests.api.compute.requests.kinds.test_multimodal import metadata as multimodal_metadata

    on_disk = {}

    def find():
        return find_on_disk(lambda part: part in on_disk, on_disk.get, ModelRef.named("org/mm"))

    metadata = multimodal_metadata()
    assert ModelRef.named("org/mm").parts_of(metadata) == ("org--mm", "org--mm---image")
    # The image graph alone (published first, or left by a delete): converting again replaces it.
    on_disk["org--mm---image"] = metadata
    assert find() == (OnDisk.HALF_PUBLISHED, None)
    on_disk["org--mm"] = metadata
    assert find() == (OnDisk.PUBLISHED, metadata)
    # Its text graph without the image graph its metadata names: not a whole model.
    del on_disk["org--mm---image"]
    assert find() == (OnDisk.HALF_PUBLISHED, None)
    # A dense model of the name needs no image graph.
    on_disk["org--mm"] = dense = fake_metadata("org/mm")
    assert find() == (OnDisk.PUBLISHED, dense)
    assert ModelRef.named("org/mm").every_part() == ("org--mm", "org--mm---late", "org--mm---image")


def test_a_dense_model_with_late_chunking_is_published_with_its_late_graph():
    from embedgate.contract.kinds.dense import DenseInfo, LateChunking

    on_disk = {}
    ref = ModelRef.named("org/m")
    metadata = fake_metadata("org/m", record=DenseInfo(late_chunking=LateChunking(parity=fake_metadata("org/m").parity)))
    assert ref.parts_of(metadata) == ("org--m", "org--m---late")
    on_disk["org--m"] = metadata
    found = find_on_disk(lambda part: part in on_disk, on_disk.get, ref)
    assert found == (OnDisk.HALF_PUBLISHED, None)  # its late graph missing: converting again replaces it
    on_disk["org--m---late"] = metadata
    assert find_on_disk(lambda part: part in on_disk, on_disk.get, ref) == (OnDisk.PUBLISHED, metadata)


def test_a_vision_language_model_is_published_with_the_parts_its_kind_declares():
    from tests.api.compute.requests.kinds.test_vision_language import metadata as vision_language_metadata

    on_disk = {}
    ref = ModelRef.named("org/vl")
    metadata = vision_language_metadata().model_copy(update={"model_name": "org/vl", "triton_name": "org--vl"})
    assert ref.parts_of(metadata) == ("org--vl", "org--vl---image")
    # Not loaded, and named only: every part any kind of its library declares is looked for.
    assert set(ref.parts_of(metadata)) <= set(ref.every_part())
    on_disk["org--vl"] = metadata
    assert find_on_disk(lambda part: part in on_disk, on_disk.get, ref) == (OnDisk.HALF_PUBLISHED, None)
    on_disk["org--vl---image"] = metadata
    assert find_on_disk(lambda part: part in on_disk, on_disk.get, ref) == (OnDisk.PUBLISHED, metadata)


def test_a_clip_models_parts_are_its_towers_whatever_it_holds():
    ref = ModelRef.named("ViT-B-32", "tag")
    assert ref.parts() == ref.every_part() == ("ViT-B-32_tag_text_encoder", "ViT-B-32_tag_image_encoder")
    assert ref.parts_of(clip_metadata("ViT-B-32", "tag")) == ref.parts()
    assert ModelRef.named("org/m").parts() == ("org--m",)
