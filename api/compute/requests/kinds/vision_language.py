"""A vision-language sentence-transformer: text and image embeddings in one space, every
input rendered through the model's chat template. Two Triton models served as one: the
language graph, with the tokenizer behind the template, and the vision graph, which makes
each image's rows for the language graph. Its texts go through the language graph as any
model's texts go through its graph; its images run in two steps (:class:`MessageImages`).

A prompt is the library's system message, not text before the input: a prompted text
keeps its prompt apart (``PromptedText``) until the tokenizer renders it, and an image run
carries its prompt to its rendering."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Sequence
from typing import Any

import numpy as np

from embedgate.contract.kinds.vision_language import (
    IMAGE_EMBEDS,
    KIND,
    PATCHES,
    POSITION_IDS,
    PatchImages,
    VisionLanguageMetadata,
    vision_language_part_names,
)
from embedgate.contract.preprocess.text import TokenBatch
from embedgate.contract.preprocess.vision_language_positions import text_positions, token_positions, vision_inputs
from embedgate.contract.preprocess.vision_language_text import ImageTooLong, MessageTokenizer
from embedgate.contract.spec import ATTENTION_MASK, INPUT_IDS

from ....errors import InvalidImage, InvalidOption
from ..asks import Ask, ImageInput, MessageInput, Output, Plan, Run, Served
from ..media import has_images, image_plan, mixed_plan
from ..prompts import prompt_for
from ..quantize import available
from ..results import Embeddings
from ..routes import EVERY_TASK, Route
from ..steps import Engine, Model, RouteParts, Step
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
            Route("images", EVERY_TASK, tokenizer, vision, step=MessageImages(self.record.images, language)),
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


class MessageImages(Step):
    """A vision-language model's images, in two steps.

    An image becomes a run of image tokens inside the text the model's chat template
    renders, and the language model reads the vision graph's rows in their places. So each
    image is fetched and cut into patches in the image threads (as the model's processor
    cuts it), then its patches go through the vision graph (the route's Triton model: one
    call per image, a bounded number at a time, an image's attention spans its own patches
    only), the images' texts (an input of a text and an image together: its parts in their
    order) are rendered with the run's prompt and tokenized in the pool (an image's tokens
    past the max length are refused, as the library would fail on them), and the inputs go
    through the language graph in calls of at most the model's batch size, each with its
    images' rows and their multimodal positions. An image that cannot be used is its
    request's error."""

    takes_images = True
    own_errors = (InvalidImage,)

    def __init__(self, spec: PatchImages, language: str):
        self.spec = spec
        self.language = language

    def cost(self, inputs: Sequence[Any]) -> float:
        """Its images (an input of parts may hold several, or none)."""
        return float(sum(
            sum(isinstance(part, ImageInput) for part in value.parts) if isinstance(value, MessageInput) else 1
            for value in inputs
        ))

    async def run(
        self, engine: Engine, model: Model, route: RouteParts, inputs: list, prompt: str, timeout_s: float
    ) -> Embeddings:
        """``inputs``: images (URLs, data URIs or bytes) and inputs of parts (``MessageInput``:
        texts and images together, one embedding each), each rendered with ``prompt`` (the
        library's system message)."""
        spec, kind = self.spec, model.kind
        items = [value.parts if isinstance(value, MessageInput) else (ImageInput(value),) for value in inputs]
        sources = [part.source for parts in items for part in parts if isinstance(part, ImageInput)]
        # Where each input's images begin among all of them.
        starts = np.cumsum([0] + [sum(isinstance(part, ImageInput) for part in parts) for parts in items]).tolist()
        started = time.perf_counter()
        prepared = await engine.load_patches(sources, spec) if sources else []
        loaded = time.perf_counter()
        grids = [grid for _, grid in prepared]

        async def vision(one: tuple[np.ndarray, Any]) -> np.ndarray:
            tensors, restore = kind.vision_inputs(*one)
            rows = await engine.infer(model, route.part, tensors, IMAGE_EMBEDS, timeout_s=timeout_s)
            return rows if restore is None else rows[:, restore]  # window by window: back in order

        rows = await engine.bounded(vision, prepared)
        tokens = iter([spec.tokens(grid) for grid in grids])
        parts = [[part if isinstance(part, str) else next(tokens) for part in mine] for mine in items]
        noun = "input" if any(isinstance(value, MessageInput) for value in inputs) else "image"
        try:
            batch = await engine.in_pool(route.tokenizer.encode_parts, parts, prompt, noun)
        except ImageTooLong as error:
            raise InvalidImage("image_too_large", str(error)) from None
        tokenized = time.perf_counter()
        types = route.tokenizer.image_tokens(batch)
        limit = max(1, model.metadata.max_batch_size)

        def text(span: range) -> Awaitable[np.ndarray]:
            width = max(batch.token_counts[row] for row in span)
            mask = batch.attention_mask[span.start : span.stop, :width]
            first, last = starts[span.start], starts[span.stop]
            tensors = {
                INPUT_IDS: np.ascontiguousarray(batch.input_ids[span.start : span.stop, :width]),
                ATTENTION_MASK: np.ascontiguousarray(mask),
                POSITION_IDS: token_positions(
                    mask, types[span.start : span.stop, :width], grids[first:last], spec.merge_size
                ),
                IMAGE_EMBEDS: np.concatenate(rows[first:last], axis=1) if last > first else kind.no_image_rows(),
            }
            return engine.infer(model, self.language, tensors, kind.output, timeout_s=timeout_s)

        spans = [range(start, min(start + limit, len(items))) for start in range(0, len(items), limit)]
        vectors = np.concatenate(await engine.bounded(text, spans))
        # Preparing and tokenizing images is what tokenizing is to texts.
        return Embeddings(
            vectors, list(batch.token_counts), 0, tokenize_ms=(loaded - started) * 1000,
            inference_ms=(time.perf_counter() - tokenized) * 1000,
        )
