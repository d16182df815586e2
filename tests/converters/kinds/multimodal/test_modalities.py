"""What a multimodal Transformer takes, and the reason the gateway gives where it cannot
serve it exactly."""

from __future__ import annotations

import pytest

from embedgate.converters.kinds.multimodal.modalities import VISION_LANGUAGE, modalities, refusal


class Transformer:
    def __init__(self, *taken):
        self.modality_config = {modality: {"method": "forward", "method_output_name": None} for modality in taken}


def test_text_and_images_each_alone_are_served():
    assert refusal(Transformer("text", "image")) is None
    assert modalities(Transformer("text", ("image", "text"))) == ["text", "image+text"]


@pytest.mark.parametrize(
    "taken, words",
    [
        (("text", "image", "video", "message"), VISION_LANGUAGE),
        (("text", "image", "audio"), "it takes audio"),
        (("audio", ("audio", "text")), "it takes audio"),
        (("text", "image", ("image", "text")), "embeds image+text inputs together"),
        (("image",), "but not text"),
        (("text",), "but not image"),
    ],
)
def test_what_cannot_be_served_is_refused_saying_why(taken, words):
    assert words in refusal(Transformer(*taken))
