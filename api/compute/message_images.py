"""Images through a vision-language model, in two steps.

An image becomes a run of image tokens inside the text the model's chat template renders,
and the language model reads the vision tower's rows in their places. So each image is
fetched and cut into patches in the image threads (as the model's processor cuts it),
then its patches go through the vision graph (one call per image, a bounded number at a
time: an image's attention spans its own patches only), the images' texts (an input of a
text and an image together: its parts in their order) are rendered
and tokenized in the pool (an image's tokens past the max length are refused, as the
library would fail on them), and the images go through the language graph in calls of at
most the model's batch size, each with its images' rows and their multimodal positions.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np

from embedgate.contract.kinds.vision_language import IMAGE_EMBEDS, POSITION_IDS, PatchImages
from embedgate.contract.preprocess.vision_language_positions import token_positions
from embedgate.contract.preprocess.vision_language_text import ImageTooLong
from embedgate.contract.spec import ATTENTION_MASK, INPUT_IDS

from ..errors import InvalidImage
from .backend.base import Backend
from .images.loader import ImageLoader
from .requests.asks import ImageInput, MessageInput
from .requests.results import Embeddings
from .requests.routes import Route, route_for
from .requests.served import ServedModel
from .scheduling.backlog import Backlogs
from .scheduling.threads import OffLoopThreads


class MessageImages:
    """Mixed into ``EmbeddingService``, whose backend, image loader, pool and backlogs it uses."""

    backend: Backend
    images: ImageLoader
    backlogs: Backlogs
    _pool: OffLoopThreads
    _bounded: Callable[..., Awaitable[list[np.ndarray]]]

    async def _message_images(
        self, model: ServedModel, route: Route, inputs: Sequence[Any], timeout_s: float, prompt: str = ""
    ) -> Embeddings:
        """``inputs`` through ``route``, a vision-language model's image route, each rendered
        with ``prompt`` (the library's system message): images (URLs, data URIs or bytes) and
        inputs of parts (``MessageInput``: texts and images together, one embedding each)."""
        spec: PatchImages = route.images
        language = route_for(model.routes, None, model.name).part
        items = [value.parts if isinstance(value, MessageInput) else (ImageInput(value),) for value in inputs]
        sources = [part.source for parts in items for part in parts if isinstance(part, ImageInput)]
        # Where each input's images begin among all of them.
        starts = np.cumsum([0] + [sum(isinstance(part, ImageInput) for part in parts) for parts in items]).tolist()
        with self.backlogs.admitted(model, route.part, len, sources, timeout_s):
            started = time.perf_counter()
            prepared = await self.images.load_patches(sources, spec) if sources else []
            loaded = time.perf_counter()
            grids = [grid for _, grid in prepared]

            async def vision(one: tuple[np.ndarray, Any]) -> np.ndarray:
                tensors, restore = model.kind.vision_inputs(*one)
                rows = await self.backend.infer(model, route.part, tensors, IMAGE_EMBEDS, timeout_s=timeout_s)
                return rows if restore is None else rows[:, restore]  # window by window: back in order

            rows = await self._bounded(vision, prepared)
            tokens = iter([spec.tokens(grid) for grid in grids])
            parts = [[part if isinstance(part, str) else next(tokens) for part in mine] for mine in items]
            noun = "input" if any(isinstance(value, MessageInput) for value in inputs) else "image"
            try:
                batch = await self._pool.run(route.tokenizer.encode_parts, parts, prompt, noun)
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
                    IMAGE_EMBEDS: (
                        np.concatenate(rows[first:last], axis=1) if last > first else model.kind.no_image_rows()
                    ),
                }
                return self.backend.infer(model, language, tensors, model.kind.output, timeout_s=timeout_s)

            spans = [range(start, min(start + limit, len(items))) for start in range(0, len(items), limit)]
            vectors = np.concatenate(await self._bounded(text, spans))
            finished = time.perf_counter()
        # Preparing and tokenizing images is what tokenizing is to texts.
        return Embeddings(
            vectors, list(batch.token_counts), 0, tokenize_ms=(loaded - started) * 1000,
            inference_ms=(finished - tokenized) * 1000,
        )
