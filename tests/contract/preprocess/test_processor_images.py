"""A Hugging Face image processor's preparation replayed: the gateway's uint8 pixels,
normalized as the image graph normalizes them, are the processor's own pixel values, for
both of its backends, with and without a crop, for every kind of image the parity check
uses; and what cannot be afforded is refused."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from embedgate.contract.kinds.multimodal import ProcessorImages
from embedgate.contract.preprocess.images import ImageRejected, prepare_image
from embedgate.contract.preprocess.processor_images import center_crop, resized_size, rgb
from embedgate.converters.kinds.multimodal.processor import normalized, processor_images
from embedgate.converters.library.image_parity import parity_images

LIMIT = 50_000_000


def encode(image: Image.Image, fmt: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return buffer.getvalue()


class Wrapped:
    """What ``processor_images`` reads of a sentence-transformers Transformer."""

    def __init__(self, image_processor, processing_kwargs=None):
        self.processor = type("Processor", (), {"image_processor": image_processor})()
        self.processing_kwargs = processing_kwargs or {}


def clip_processor(backend: str, **settings):
    from transformers import CLIPImageProcessor, CLIPImageProcessorPil

    cls = CLIPImageProcessor if backend == "torchvision" else CLIPImageProcessorPil
    return cls(**{"size": {"shortest_edge": 40}, "crop_size": {"height": 32, "width": 32}, **settings})


def siglip_processor(backend: str):
    from transformers import SiglipImageProcessor, SiglipImageProcessorPil

    cls = SiglipImageProcessor if backend == "torchvision" else SiglipImageProcessorPil
    return cls(size={"height": 24, "width": 36})


PROCESSORS = {
    "CLIP, the short side then a crop": clip_processor,
    "CLIP, a crop larger than the resize (padding)": lambda backend: clip_processor(
        backend, size={"shortest_edge": 20}, crop_size={"height": 27, "width": 33}
    ),
    "SigLIP, both sides, bilinear": siglip_processor,
}


@pytest.mark.parametrize("backend", ["torchvision", "pil"])
@pytest.mark.parametrize("name", list(PROCESSORS))
def test_the_replay_gives_the_processors_own_pixel_values(name, backend):
    image_processor = PROCESSORS[name](backend)
    images = processor_images(Wrapped(image_processor))
    assert images.backend == backend
    for label, data in parity_images():
        ours = prepare_image(data, images, max_pixels=LIMIT)
        assert ours.shape == (images.height, images.width, 3) and ours.dtype == np.uint8
        theirs = image_processor(images=[Image.open(io.BytesIO(data))], return_tensors="np")["pixel_values"]
        assert np.abs(normalized(ours[None], images) - theirs).max() < 1e-5, label


def test_transparency_is_composited_onto_white_as_transformers_converts():
    rgba = Image.new("RGBA", (4, 4), (10, 20, 30, 0))
    assert np.asarray(rgb(rgba)).tolist()[0][0] == [255, 255, 255]
    palette = Image.new("P", (4, 4), 1)
    palette.putpalette([0, 0, 0, 200, 100, 50] + [0] * 762)
    palette.info["transparency"] = 1
    assert np.asarray(rgb(palette)).tolist()[0][0] == [255, 255, 255]
    assert np.asarray(rgb(Image.new("L", (2, 2), 7))).tolist()[0][0] == [7, 7, 7]


def test_padding_puts_the_odd_pixel_where_each_backend_does():
    pixels = np.full((3, 3, 3), 9, dtype=np.uint8)
    torchvision = center_crop(pixels, 6, 6, "torchvision")
    pil = center_crop(pixels, 6, 6, "pil")
    assert torchvision[1:4, 1:4].min() == 9 and torchvision[0].max() == 0 and torchvision[4:].max() == 0
    assert pil[2:5, 2:5].min() == 9 and pil[:2].max() == 0 and pil[5].max() == 0


def test_the_short_side_is_resized_and_the_long_one_truncated():
    images = ProcessorImages(processor="p", backend="torchvision", shortest_edge=224, height=224, width=224)
    assert resized_size(480, 640, images) == (224, 298)
    assert resized_size(640, 480, images) == (298, 224)
    assert resized_size(5, 5, images) == (224, 224)


def test_an_image_too_elongated_to_resize_is_refused():
    images = ProcessorImages(processor="p", backend="torchvision", shortest_edge=224, crop_height=224,
                             crop_width=224, height=224, width=224)
    strip = encode(Image.new("RGB", (1, 5000)))
    with pytest.raises(ImageRejected) as refused:
        prepare_image(strip, images, max_pixels=1_000_000)
    assert refused.value.code == "image_too_large" and "too elongated" in refused.value.reason
