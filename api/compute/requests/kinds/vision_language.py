"""A vision-language sentence-transformer: text and image embeddings in one space, every
input rendered through the model's chat template. Two Triton models served as one: the
language graph, with the tokenizer behind the template, and the vision graph, which makes
each image's rows for the language graph (``compute/message_images.py`` runs both).

A prompt is the library's system message, not text before the input: a prompted text
keeps its prompt apart (``PromptedText``) until the tokenizer renders it, and an image run
carries its prompt to its rendering."""

from __future__ import annotations

from typing import Any

import numpy as np

from embedgate.contract.kinds.vision_language import (
    IMAGE_EMBEDS,
    KIND,
    PATCHES,
    POSITION_IDS,
    VisionLanguageMetadata,
    vision_language_part_names,
)
from embedgate.contract.preprocess.vision_language_positions import text_positions, vision_inputs
from embedgate.contract.preprocess.vision_language_text import MessageTokenizer
from embedgate.contract.spec import ATTENTION_MASK, INPUT_IDS
from embedgate.contract.preprocess.text import TokenBatch

from ....errors import InvalidOption
from ..asks import Ask, Output, Plan, Run, Served
from ..media import has_images, image_plan, mixed_plan
from ..prompts import prompt_for
from ..quantize import available
from ..routes import EVERY_TASK, Route
from .base import Files, ServedKind
from .dense import PRECISIONS_FIELD, dense_plan
from .multimodal import MultimodalKind



class VisionLanguageKind(ServedKind):
    name = KIND.name
    title = "a vision-language sentence-transformer (text and image embeddings)"
    outputs = frozenset({Output.EMBED, Output.IMAGES})
    text_output = Output.EMBED
    metric_parts = ("language", "vision")
    listing_fields = {"modalities": MultimodalKind.listing_fields["modalities"], "precisions": PRECISIONS_FIELD}

    @property
    def record(self) -> VisionLanguageMetadata:
        record = self.metadata.record_of(VisionLanguageMetadata)
        assert record is not None
        return record

    def parts(self, triton_name: str) -> tuple[str, ...]:
        return vision_language_part_names(triton_name)

    def tokenizer(self, files: Files, triton_name: str) -> MessageTokenizer:
        tokenizer_file = self.tokenizer_file(files, triton_name)
        return MessageTokenizer(tokenizer_file, self.metadata.max_seq_length, self.record.template)

    def routes(self, files: Files, triton_name: str) -> list[Route]:
        """The texts' route (the language graph), and the images' (the vision graph, then the
        language graph), sharing the tokenizer."""
        tokenizer = self.tokenizer(files, triton_name)
        language, vision = self.parts(triton_name)
        return [
            Route("", EVERY_TASK, tokenizer, language),
            Route("images", EVERY_TASK, tokenizer, vision, images=self.record.images),
        ]

    def text_inputs(self, batch: TokenBatch, rows: np.ndarray | slice, width: int) -> dict[str, np.ndarray]:
        """Texts through the language graph: their positions, and no image rows."""
        mask = np.ascontiguousarray(batch.attention_mask[rows, :width])
        return {
            INPUT_IDS: np.ascontiguousarray(batch.input_ids[rows, :width]),
            ATTENTION_MASK: mask,
            POSITION_IDS: text_positions(mask),
            IMAGE_EMBEDS: self.no_image_rows(),
        }

    def vision_inputs(
        self, patches: np.ndarray, grid: tuple[int, int, int]
    ) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
        """The vision graph's tensors for one image's patches, and the order that puts its
        rows back where the graph gives them window by window (else None)."""
        record = self.record
        return vision_inputs(patches, grid, record.images, record.position_grid, record.window_size)

    def no_image_rows(self) -> np.ndarray:
        """The language graph's image rows for inputs without images: ``[levels, 0, hidden]``."""
        record = self.record
        return np.zeros((record.image_levels, 0, record.image_hidden), dtype=np.float32)

    def joins_parts(self) -> bool:
        return self.record.template.parts_joined

    def noop_output(self, tensors: dict[str, np.ndarray]) -> np.ndarray:
        patches = tensors.get(PATCHES)
        if patches is None:
            return super().noop_output(tensors)
        record = self.record
        merged = record.images.merge_size ** 2
        return np.zeros((record.image_levels, len(patches) // merged, record.image_hidden), dtype=np.float32)

    def plan(self, model: Served, ask: Ask) -> Plan:
        if ask.chunking is not None:
            raise InvalidOption(
                f"model '{model.name}' is {self.title}: its inputs are rendered through its chat template whole, "
                "and are not cut into chunks",
                "chunking",
            )
        if ask.output is Output.IMAGES:
            return self._images(model, ask)
        if has_images(ask.inputs):
            return mixed_plan(model, ask, self._texts, self._images)
        return self._texts(model, ask)

    @staticmethod
    def _texts(model: Served, ask: Ask) -> Plan:
        return dense_plan(model, ask, prompt_apart=True)

    @staticmethod
    def _images(model: Served, ask: Ask) -> Plan:
        """As any model's images, their run carrying the prompt (the library's system message)."""
        plan = image_plan(model, ask)
        (run,) = plan.runs
        return Plan([Run(run.route, run.inputs, prompt_for(model.name, model.metadata, ask.prompt))], plan.finish)

    def listing(self) -> dict[str, Any]:
        return {"modalities": list(self.record.modalities), "precisions": list(available(self.metadata.calibration))}
