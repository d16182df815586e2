"""A multimodal sentence-transformer: text and image embeddings in one space (``encode`` of
texts and of images), two Triton models served as one: the text graph, with the tokenizer,
and the image graph beside it."""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field

from embedgate.contract.kinds.multimodal import KIND, MultimodalMetadata, multimodal_part_names
from embedgate.contract.spec import PIXELS

from ..asks import Ask, Output, Plan, Served
from ..media import IMAGE_SIZE_FIELD, has_images, image_plan, mixed_plan
from ..quantize import available
from ..routes import EVERY_TASK, Route
from ..steps import ImageGraph
from .base import Files, ServedKind
from .dense import PRECISIONS_FIELD, dense_plan


class MultimodalKind(ServedKind):
    name = KIND.name
    title = "a multimodal sentence-transformer (text and image embeddings)"
    outputs = frozenset({Output.EMBED, Output.IMAGES})
    text_output = Output.EMBED
    metric_parts = ("text", "image")
    listing_fields = {
        "image_size": IMAGE_SIZE_FIELD,
        "modalities": (
            list[str] | None,
            Field(None, description="Multimodal models: what they take, as sentence-transformers names it."),
        ),
        "precisions": PRECISIONS_FIELD,
    }

    @property
    def record(self) -> MultimodalMetadata:
        record = self.metadata.record_of(MultimodalMetadata)
        assert record is not None
        return record

    def plan(self, model: Served, ask: Ask) -> Plan:
        if ask.output is Output.IMAGES:
            return image_plan(model, ask)
        if has_images(ask.inputs):
            return mixed_plan(model, ask, dense_plan, image_plan)
        return dense_plan(model, ask)

    def parts(self, triton_name: str) -> tuple[str, ...]:
        return multimodal_part_names(triton_name)

    def routes(self, files: Files, triton_name: str) -> list[Route]:
        """The text graph's route, and the image graph's, which takes images."""
        images = Route("images", EVERY_TASK, None, self.parts(triton_name)[1], step=ImageGraph(self.record.image))
        return [*super().routes(files, triton_name), images]

    def image_inputs(self, pixels: np.ndarray) -> dict[str, np.ndarray]:
        """The image graph's tensors for a batch of prepared images (uint8 [n, h, w, 3])."""
        return {PIXELS: pixels}

    def listing(self) -> dict[str, Any]:
        record = self.record
        return {
            "image_size": [record.image.height, record.image.width],
            "modalities": list(record.modalities),
            # Image embeddings have no calibrated ranges: int8/uint8 are for the text's.
            "precisions": list(available(self.metadata.calibration)),
        }
