"""An OpenCLIP model: text and image embeddings in one space, two Triton models (the text
tower, with the tokenizer, and the image tower), served as one model."""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field

from embedgate.contract.kinds.clip import KIND, ClipMetadata
from embedgate.contract.preprocess.clip_text import AnyClipTokenizer, clip_tokenizer
from embedgate.contract.preprocess.text import TokenBatch
from embedgate.contract.spec import INPUT_IDS, PIXELS, clip_part_names

from .. import media
from ..asks import Ask, Output, Plan, Run, Served, joined
from ..media import IMAGE_SIZE_FIELD, has_images, mixed_plan
from ..quantize import available, quantized
from ..routes import EVERY_TASK, Route, route_for
from ..steps import ImageGraph
from .base import Files, ServedKind
from .dense import PRECISIONS_FIELD, dense_plan, unit_rows


class ClipKind(ServedKind):
    name = KIND.name
    title = "an OpenCLIP model (text and image embeddings)"
    outputs = frozenset({Output.EMBED, Output.IMAGES})
    text_output = Output.EMBED
    metric_parts = ("text_encoder", "image_encoder")
    listing_fields = {
        "pretrained": (str | None, Field(None, description="CLIP models: their pretrained.")),
        "image_size": IMAGE_SIZE_FIELD,
        "precisions": PRECISIONS_FIELD,
    }

    def plan(self, model: Served, ask: Ask) -> Plan:
        if ask.output is Output.IMAGES:
            return image_plan(model, ask)
        if has_images(ask.inputs):
            # Texts and images in one ask (Cohere's inputs): each finished as texts are.
            return mixed_plan(model, ask, dense_plan, media.image_plan)
        return dense_plan(model, ask)

    def routes(self, files: Files, triton_name: str) -> list[Route]:
        """The text tower's route, and the image tower's, which takes images."""
        clip = self.metadata.record_of(ClipMetadata)
        assert clip is not None
        image_tower = self.parts(triton_name)[1]
        images = Route("images", EVERY_TASK, None, image_tower, step=ImageGraph(clip.image))
        return [*super().routes(files, triton_name), images]

    def image_inputs(self, pixels: np.ndarray) -> dict[str, np.ndarray]:
        """The image tower's tensors for a batch of prepared images (uint8 [n, h, w, 3])."""
        return {PIXELS: pixels}

    def parts(self, triton_name: str) -> tuple[str, ...]:
        return clip_part_names(triton_name)

    def part_labels(self, triton_name: str) -> dict[str, dict[str, str]]:
        clip = self.metadata.record_of(ClipMetadata)
        assert clip is not None
        labelled = super().part_labels(triton_name)
        return {part: {"pretrained": clip.pretrained, **labels} for part, labels in labelled.items()}

    def tokenizer(self, files: Files, triton_name: str) -> AnyClipTokenizer:
        clip = self.metadata.record_of(ClipMetadata)
        assert clip is not None
        text_part = self.parts(triton_name)[0]
        return clip_tokenizer(self.tokenizer_file(files, text_part), clip.text)

    def text_inputs(self, batch: TokenBatch, rows: np.ndarray | slice, width: int) -> dict[str, np.ndarray]:
        # The text tower takes token ids only: it pools at the end-of-text token.
        return {INPUT_IDS: np.ascontiguousarray(batch.input_ids[rows, :width])}

    def fixed_width(self) -> int | None:
        clip = self.metadata.record_of(ClipMetadata)
        assert clip is not None
        return clip.text.context_length

    def listing(self) -> dict[str, Any]:
        clip = self.metadata.record_of(ClipMetadata)
        assert clip is not None
        return {
            "pretrained": clip.pretrained,
            "image_size": [clip.image.height, clip.image.width],
            # Image embeddings have no calibrated ranges: int8/uint8 are for the text's.
            "precisions": list(available(self.metadata.calibration)),
        }


def image_plan(model: Served, ask: Ask) -> Plan:
    """Images through the image route, then unit length and the precision asked for (int8
    and uint8 have no ranges calibrated for images: they are the text's)."""
    route = route_for(model.routes, None, model.name, images=True)
    options = ask.options

    def finish(results):
        vectors = unit_rows(results[0].vectors) if options.normalize else results[0].vectors
        vectors = quantized(vectors, options.precision, None, normalized=options.normalize, what="image embeddings")
        return joined(results, vectors)

    return Plan([Run(route, ask.inputs)], finish)
