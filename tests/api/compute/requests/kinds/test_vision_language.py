"""A vision-language sentence-transformer served: two Triton parts, a text route and an
image route sharing the tokenizer behind the chat template, texts' positions and no image
rows for the language graph, prompts kept apart for the template (texts) or beside the
images (their run), its images' two steps (the vision graph per image, then the language
graph, on a fake engine), and what is refused."""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import pytest
from PIL import Image

from embedgate.api.compute.requests.asks import Ask, ImageInput, MessageInput, Output
from embedgate.api.compute.requests.chunking import Chunking
from embedgate.api.compute.requests.kinds import kind_of
from embedgate.api.compute.requests.kinds.vision_language import MessageImages
from embedgate.api.compute.requests.prompts import PromptChoice
from embedgate.api.compute.requests.steps import TEXT_GRAPH
from embedgate.contract.kinds.vision_language import Frame, MessageTemplate, PatchImages, VisionLanguageMetadata
from embedgate.contract.preprocess.images import prepare_patched_image
from embedgate.contract.preprocess.prompted import PromptedText
from embedgate.contract.preprocess.vision_language_text import MessageTokenizer
from embedgate.contract.spec import ImageParityResult
from embedgate.api.errors import InvalidImage, InvalidOption
from tests.api.conftest import fake_metadata

IMAGES = PatchImages(patch_size=14, merge_size=2, temporal_patch_size=2, min_pixels=3136, max_pixels=12544,
                     mean=(0.5,) * 3, std=(0.5,) * 3, rescale=1 / 255)
TEMPLATE = MessageTemplate(
    text=Frame(before="<u> ", after=" </u> <e>"),
    prompted=Frame(before="<s> ", between=" </s> <u> ", after=" </u> <e>"),
    image="<v> <i> </v>", image_token="<i>", image_token_id=5, suffix_ids=[3, 4],
)
RECORD = VisionLanguageMetadata(
    modalities=["text", "image", "message"], template=TEMPLATE, images=IMAGES, image_hidden=6, pixel_max_error=0.0,
    image_parity=ImageParityResult(passed=True, threshold=0.9999, min_cosine=1.0, images=11),
)
VOCAB = {"[UNK]": 0, "<u>": 1, "</u>": 2, "<e>": 3, "<s>": 4, "<i>": 5, "<v>": 6, "</v>": 7, "</s>": 8, "a": 9, "b": 10}


def metadata():
    return fake_metadata("org/vl", kind="vision_language", record=RECORD, triton_name="org--vl", max_seq_length=8,
                         prompts={"query": "b", "document": ""})


@pytest.fixture
def files(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel(VOCAB, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(["<i>"])  # as a model's image token: matched wherever it is written
    (tmp_path / "org--vl" / "tokenizer").mkdir(parents=True)
    tokenizer.save(str(tmp_path / "org--vl" / "tokenizer" / "tokenizer.json"))
    return lambda part: tmp_path / part


@dataclass
class Model:
    routes: list
    metadata: object
    name: str = "org/vl"

    def __post_init__(self):
        self.kind = kind_of(self.metadata)


def test_two_parts_and_two_routes_sharing_the_tokenizer(files):
    kind = kind_of(metadata())
    assert kind.parts("org--vl") == ("org--vl", "org--vl---image")
    assert kind.part_labels("org--vl") == {"org--vl": {"part": "language"}, "org--vl---image": {"part": "vision"}}
    texts, images = kind.routes(files, "org--vl")
    assert isinstance(texts.tokenizer, MessageTokenizer) and images.tokenizer is texts.tokenizer
    assert (texts.part, texts.step) == ("org--vl", TEXT_GRAPH)
    assert images.part == "org--vl---image" and isinstance(images.step, MessageImages)
    assert (images.step.spec, images.step.language) == (IMAGES, "org--vl")
    listed = kind.listing()
    assert listed == {"modalities": ["text", "image", "message"], "precisions": ["float32", "binary", "ubinary"]}


def test_texts_go_through_the_language_graph_with_their_positions_and_no_image_rows(files):
    kind = kind_of(metadata())
    tokenizer = kind.routes(files, "org--vl")[0].tokenizer
    batch = tokenizer.encode(["a", PromptedText("b", "a a a a")])
    # Rendered: "<u> a </u> <e>"; "<s> b </s> <u> a a a a </u> <e>" is 11 tokens, cut at 8 with the suffix written back.
    assert batch.input_ids.tolist() == [[1, 9, 2, 3, 0, 0, 0, 0], [4, 10, 8, 1, 9, 9, 3, 4]]
    assert batch.truncated_rows == [False, True]
    tensors = kind.text_inputs(batch, slice(None), 8)
    assert tensors["position_ids"].shape == (3, 2, 8)
    assert tensors["position_ids"][0].tolist() == [[0, 1, 2, 3, 1, 1, 1, 1], list(range(8))]
    assert tensors["image_embeds"].shape == (1, 0, 6)


def test_an_image_too_long_for_the_max_length_is_refused(files):
    from embedgate.contract.preprocess.vision_language_text import ImageTooLong

    tokenizer = kind_of(metadata()).routes(files, "org--vl")[0].tokenizer
    batch = tokenizer.encode_images([2])  # "<u> <v> <i><i> </v> </u> <e>": 7 tokens
    assert tokenizer.image_tokens(batch).tolist() == [[0, 0, 1, 1, 0, 0, 0]]
    with pytest.raises(ImageTooLong, match="image 0 takes 9 tokens"):
        tokenizer.encode_images([4])


def test_prompts_are_kept_apart_for_texts_and_beside_images(files):
    model = Model(kind_of(metadata()).routes(files, "org--vl"), metadata())
    query = PromptChoice(input_type="query")
    plan = model.kind.plan(model, Ask(Output.EMBED, ["a", ImageInput("data:x"), "b"], query))
    texts, images = plan.runs
    assert texts.inputs == [PromptedText("b", "a"), PromptedText("b", "b")] and texts.prefix == ""
    assert images.inputs == ["data:x"] and images.prefix == "b" and images.route.step.spec == IMAGES
    plain = model.kind.plan(model, Ask(Output.IMAGES, ["data:y"]))
    assert plain.runs[0].prefix == ""


def test_chunking_is_refused_saying_why(files):
    model = Model(kind_of(metadata()).routes(files, "org--vl"), metadata())
    with pytest.raises(InvalidOption, match="chat template"):
        model.kind.plan(model, Ask(Output.EMBED, ["a a"], chunking=Chunking(max_tokens=1)))


def test_without_a_model_each_graph_answers_zeros_of_its_shape():
    kind = kind_of(metadata())
    vision = kind.noop_output({"patches": np.zeros((16, 588), np.uint8), "position_ids": np.zeros((16, 2), np.int64)})
    assert vision.shape == (1, 4, 6)
    ids = np.zeros((3, 5), np.int64)
    assert kind.noop_output({"input_ids": ids, "attention_mask": ids}).shape == (3, 3)


class Engine:
    """What the step asks of the compute side, in this task: images cut into patches as the
    image threads would, the pool run at once, and a backend of zeros of each graph's
    shape that records its calls."""

    max_chunks = 100

    def __init__(self, kind):
        self.kind = kind
        self.calls: list[tuple[str, str, dict]] = []

    async def load_patches(self, sources, spec):
        return [prepare_patched_image(source, spec, max_pixels=10**6) for source in sources]

    async def in_pool(self, work, *args):
        return work(*args)

    async def infer(self, model, part, tensors, output, *, timeout_s, version=""):
        self.calls.append((part, output, {name: tensor.shape for name, tensor in tensors.items()}))
        return self.kind.noop_output(tensors)

    async def bounded(self, send, parts):
        return [await send(part) for part in parts]


def png(size):
    out = io.BytesIO()
    Image.new("RGB", size, (200, 10, 10)).save(out, format="PNG")
    return out.getvalue()


async def test_images_run_the_vision_graph_per_image_then_the_language_graph_with_their_rows(files):
    wide = fake_metadata("org/vl", kind="vision_language", record=RECORD, triton_name="org--vl", max_seq_length=32,
                         max_batch_size=2, prompts={"query": "b", "document": ""})
    kind = kind_of(wide)
    _, images = kind.routes(files, "org--vl")
    model = Model([images], wide)
    engine = Engine(kind)
    # 56x56 pixels: 4x4 patches, 4 image tokens each; an input of a text and an image; a text alone.
    inputs = [png((56, 56)), MessageInput(("a", ImageInput(png((56, 56))))), MessageInput(("a a",))]
    result = await images.step.run(engine, model, images, inputs, "b", 5)

    vision = [call for call in engine.calls if call[0] == "org--vl---image"]
    language = [call for call in engine.calls if call[0] == "org--vl"]
    assert [output for _, output, _ in vision] == ["image_embeds", "image_embeds"]  # one call per image
    assert [output for _, output, _ in language] == ["embedding", "embedding"]  # at most 2 inputs a call
    # Each language call with its own images' rows (4 each), and their multimodal positions.
    assert [shapes["image_embeds"][1] for _, _, shapes in language] == [8, 0]
    assert all(shapes["position_ids"][0] == 3 for _, _, shapes in language)
    assert result.vectors.shape == (3, 3) and len(result.token_counts) == 3
    # Rendered with the prompt: "<s> b </s> <u> <v> <i><i><i><i> </v> </u> <e>" is 12 tokens.
    assert result.token_counts[0] == 12


async def test_an_image_too_long_for_the_max_length_is_its_requests_error(files):
    kind = kind_of(metadata())
    _, images = kind.routes(files, "org--vl")
    with pytest.raises(InvalidImage, match="image 0 takes"):
        await images.step.run(Engine(kind), Model([images], metadata()), images, [png((56, 56))], "", 5)
    assert images.step.own_errors == (InvalidImage,) and images.step.cost([png((56, 56)), MessageInput(("a",))]) == 1
