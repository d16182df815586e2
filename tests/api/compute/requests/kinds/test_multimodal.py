"""A multimodal sentence-transformer served: two Triton parts, a text route and an image
route, images finished as texts are, and an ask that mixes them answered in its order."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from embedgate.api.compute.requests.asks import Ask, ImageInput, Options, Output
from embedgate.api.compute.requests.kinds import kind_of
from embedgate.api.compute.requests.media import mixed_plan
from embedgate.api.compute.requests.results import Embeddings
from embedgate.api.compute.requests.routes import EVERY_TASK, Route
from embedgate.api.compute.requests.steps import TEXT_GRAPH, ImageGraph
from embedgate.api.errors import InvalidInput, InvalidOption, WrongModelKind
from embedgate.contract.kinds.multimodal import MultimodalMetadata, ProcessorImages
from embedgate.contract.spec import ImageParityResult
from tests.api.conftest import fake_metadata

IMAGES = ProcessorImages(processor="CLIPImageProcessor", backend="torchvision", shortest_edge=40, crop_height=32,
                         crop_width=32, height=32, width=24, rescale=1 / 255, mean=(0.5,) * 3, std=(0.5,) * 3)
RECORD = MultimodalMetadata(
    modalities=["text", "image"], image=IMAGES, pixel_max_error=0.0,
    image_parity=ImageParityResult(passed=True, threshold=0.9999, min_cosine=1.0, images=11),
)


def metadata(**changes):
    return fake_metadata("org/mm", kind="multimodal", record=RECORD, triton_name="org--mm", **changes)


@dataclass
class Model:
    metadata: object
    name: str = "org/mm"

    def __post_init__(self):
        self.kind = kind_of(self.metadata)
        parts = self.kind.parts("org--mm")
        self.routes = [Route("", EVERY_TASK, None, parts[0])]
        if len(parts) > 1:
            self.routes.append(Route("images", EVERY_TASK, None, parts[1], step=ImageGraph(IMAGES)))


def tokenizer_files(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    (tmp_path / "org--mm" / "tokenizer").mkdir(parents=True)
    tokenizer.save(str(tmp_path / "org--mm" / "tokenizer" / "tokenizer.json"))
    return lambda part: tmp_path / part


def test_two_parts_a_text_route_and_an_image_route(tmp_path):
    kind = kind_of(metadata())
    assert kind.parts("org--mm") == ("org--mm", "org--mm---image")
    assert kind.part_labels("org--mm") == {"org--mm": {"part": "text"}, "org--mm---image": {"part": "image"}}
    text, images = kind.routes(tokenizer_files(tmp_path), "org--mm")
    assert (text.part, text.step) == ("org--mm", TEXT_GRAPH) and text.tokenizer.encode(["a a"]).input_ids.tolist() == [[1, 1]]
    assert (images.part, images.tokenizer) == ("org--mm---image", None)
    assert isinstance(images.step, ImageGraph) and images.step.preparation == IMAGES
    assert kind.gives() == {Output.EMBED, Output.IMAGES} and kind.text_output is Output.EMBED


def test_the_listing_shows_the_image_size_and_the_modalities():
    assert kind_of(metadata()).listing() == {
        "image_size": [32, 24], "modalities": ["text", "image"], "precisions": ["float32", "binary", "ubinary"],
    }


def outputs(*rows):
    return Embeddings(np.asarray(rows, dtype=np.float32), [0] * len(rows), 0, 1.0, 2.0)


def test_images_are_finished_as_texts_are():
    model = Model(metadata(embedding_dim=4, normalized=False))
    plan = model.kind.plan(model, Ask(Output.IMAGES, ["u1", "u2"], options=Options(dimensions=2)))
    assert [run.route.name for run in plan.runs] == ["images"] and plan.runs[0].inputs == ["u1", "u2"]
    answer = plan.finish([outputs([3, 4, 5, 6], [0, 2, 1, 1])])
    np.testing.assert_allclose(answer.vectors, [[0.6, 0.8], [0.0, 1.0]])
    binary = model.kind.plan(model, Ask(Output.IMAGES, ["u"], options=Options(precision="ubinary")))
    assert binary.finish([outputs([1, -1, 1, -1])]).vectors.tolist() == [[160]]


@pytest.mark.parametrize(
    "options, error",
    [(Options(precision="int8"), InvalidInput), (Options(dimensions=4), InvalidOption), (Options(top_k=3), InvalidOption)],
)
def test_what_image_embeddings_cannot_be_is_refused_before_anything_runs(options, error):
    model = Model(metadata())
    with pytest.raises(error):
        model.kind.plan(model, Ask(Output.IMAGES, ["u"], options=options))


def test_an_ask_of_texts_and_images_answers_in_its_inputs_order():
    model = Model(metadata(normalized=True))
    ask = Ask(Output.EMBED, ["t0", ImageInput("i1"), "t2", ImageInput(b"i3")])
    plan = model.kind.plan(model, ask)
    assert [(run.route.name, run.inputs) for run in plan.runs] == [("", ["t0", "t2"]), ("images", ["i1", b"i3"])]
    texts = Embeddings(np.array([[1, 0, 0], [2, 0, 0]], dtype=np.float32), [3, 5], 1, 1.0, 2.0,
                       truncated_rows=[False, True])
    answer = plan.finish([texts, outputs([0, 1, 0], [0, 0, 1])])
    assert answer.vectors[:, :].argmax(axis=1).tolist() == [0, 1, 0, 2]
    assert answer.token_counts == [3, 0, 5, 0] and answer.truncated_rows == [False, False, True, False]


def test_images_in_an_ask_of_a_model_without_images_are_refused():
    dense = Model(fake_metadata("org/dense"))
    with pytest.raises(WrongModelKind, match="gives no embeddings of images"):
        mixed_plan(dense, Ask(Output.EMBED, ["t", ImageInput("i")]), None, None)
