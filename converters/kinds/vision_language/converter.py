"""A vision-language sentence-transformer -> a language graph (with the tokenizer) and a
vision graph, checked together against ``SentenceTransformer.encode``.

Everything the gateway computes is what is checked: the parity texts (one past the max
length, where the library cuts them and writes the template's end back) and the parity
images go through the gateway's own tokenizer, patches and positions, then through the
exported graphs under onnxruntime, and must reach the cosine threshold against ``encode``
(texts also with a prompt, as the library's system message). The token ids must be the
library's, the patches the processor's pixel values.

Only the forms whose every step is replayed are converted: Qwen2-VL's, Qwen2.5-VL's and
Qwen3-VL's vision towers (attention over one image; Qwen2.5-VL's layers that attend within
windows, the patches sent window by window with each one's window; Qwen3-VL's learned
position grid resampled per image by the gateway, its deepstack rows added to the first
language layers) and multimodal rotary positions. Another model is refused by name, a
form that differs in what it computes by its parity.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2 as pb

from embedgate.contract.errors import ParityError, UnsupportedModelError
from embedgate.contract.kinds.vision_language import (
    IMAGE_EMBEDS,
    INTERP_INDICES,
    INTERP_WEIGHTS,
    KIND,
    PATCHES,
    POSITION_IDS,
    WINDOW_IDS,
    PatchImages,
    VisionLanguageMetadata,
    vision_language_part_names,
)
from embedgate.contract.preprocess.images import prepare_patched_image
from embedgate.contract.preprocess.vision_language_positions import text_positions, token_positions, vision_inputs
from embedgate.contract.preprocess.vision_language_text import MessageTokenizer
from embedgate.contract.spec import EMBEDDING, ONNX_FILE, TOKENIZER_DIR, ImageParityResult, ModelMetadata, ParityResult
from embedgate.converters import calibration
from embedgate.converters.kinds.library import Converted, LibraryKind
from embedgate.converters.kinds.multimodal.converter import implied_max_length
from embedgate.converters.kinds.multimodal.modalities import modalities
from embedgate.converters.kinds.vision_language import graphs
from embedgate.converters.library import image_parity, module_stack, parity
from embedgate.converters.library.routes import ModuleRoute
from embedgate.converters.triton_config import build_request_config

# The models whose every step the graphs replay.
REPLAYED = ("Qwen2VLModel", "Qwen2_5_VLModel", "Qwen3VLModel")
# A prompt the texts are also checked with (as the library's system message).
PARITY_PROMPT = "Represent the user's input."


class VisionLanguageConverter(LibraryKind):
    kind = KIND
    noun = "vision-language sentence-transformer"

    def parts(self) -> tuple[str, ...]:
        return vision_language_part_names(self.spec.triton_name)

    def route_refusal(self, route: ModuleRoute) -> str | None:
        transformer = route.modules[0]
        if not any(cls.__name__ == "Transformer" for cls in type(transformer).__mro__):
            return f"the first module is {type(transformer).__name__}, not a Transformer"
        backbone = type(transformer.auto_model).__name__
        if backbone not in REPLAYED:
            return (
                f"its model is a {backbone}; embedgate replays the vision towers and multimodal positions of "
                f"{', '.join(REPLAYED)} (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) only"
            )
        if getattr(transformer.processor, "image_token", None) is None:
            return "its processor names no image token"
        for module in route.modules[1:]:
            if type(module).__name__ not in ("Pooling", "Normalize", "Dense"):
                return (
                    f"a {type(module).__name__} module follows its Transformer; embedgate serves Pooling, Dense "
                    "and Normalize"
                )
        return None

    def max_length(self, model, modules: Sequence) -> int:
        return implied_max_length(modules[0])

    def convert(self, directories: Sequence[Path]) -> ModelMetadata:
        import torch

        language_dir, vision_dir = directories
        loaded = self.load()
        model, route = loaded.model, loaded.routes[0]
        transformer = route.modules[0]
        backbone = transformer.auto_model
        max_length = self.max_length(model, route.modules)
        transformer.max_seq_length = max_length  # the library then cuts where the gateway does
        images = graphs.patch_images(transformer.processor.image_processor)
        template = graphs.message_template(transformer)
        self.step("saving tokenizer")
        tokenizer_file = module_stack.save_tokenizer(
            transformer.processor.tokenizer, language_dir / TOKENIZER_DIR, max_length, False
        )
        tokenizer = MessageTokenizer(tokenizer_file, max_length, template)
        hidden = int(backbone.config.text_config.hidden_size)
        levels, grid_side = 1 + graphs.deepstack_levels(backbone), graphs.position_grid(backbone)
        window = graphs.window_size(backbone)
        empty = (levels, hidden)  # the image rows of inputs without images: [levels, 0, hidden]

        def vision_feeds(patches, grid) -> dict:
            return vision_inputs(patches, grid, images, grid_side, window)[0]

        def image_rows(run, patches, grid) -> np.ndarray:
            feeds, restore = vision_inputs(patches, grid, images, grid_side, window)
            rows = run(feeds)
            return rows if restore is None else rows[:, restore]

        labels, encoded = zip(*image_parity.parity_images())
        decoded = image_parity.decoded(encoded)
        prepared = [prepare_patched_image(data, images, max_pixels=image_parity.UNLIMITED_PIXELS) for data in encoded]
        pixel_error = self._check_patches(transformer, images, decoded, prepared, labels)

        vision_file = vision_dir / "1" / ONNX_FILE
        self.step(f"exporting the vision graph to ONNX (opset {module_stack.OPSET})")
        vision = graphs.vision_graph(backbone, images)
        example = {name: torch.from_numpy(value) for name, value in vision_feeds(*prepared[0]).items()}
        graphs.export_vision(vision, example, vision_file, route.modules)
        run_vision = parity.onnx_runner(vision_file, IMAGE_EMBEDS)
        rows = [image_rows(run_vision, patches, grid) for patches, grid in prepared]

        sentences = parity.parity_sentences(max_length)
        language_file = language_dir / "1" / ONNX_FILE
        self.step(f"exporting the language graph to ONNX (opset {module_stack.OPSET})")
        language = graphs.language_graph(backbone, list(route.modules[1:]), template.image_token_id)
        example = _language_feeds(tokenizer, images, sentences[:1], prepared[:1], rows[:1], empty)
        tensors = {name: torch.from_numpy(value) for name, value in example.items()}
        graphs.export_language(language, tensors, language_file, route.modules)
        run_language = parity.onnx_runner(language_file, graphs.EMBEDDING)

        self.step(f"parity check on {len(sentences)} sentences, with and without a prompt")
        self._check_token_ids(model, tokenizer, sentences)
        results = [
            self._texts(model, tokenizer, run_language, sentences, prompt, empty) for prompt in ("", PARITY_PROMPT)
        ]
        text_result = min(results, key=lambda result: result.min_cosine)
        self.step(f"text parity passed: min cosine {text_result.min_cosine:.6f}")
        self.step(f"image parity check on {len(prepared)} images")
        image_result = self._images(model, tokenizer, images, run_language, decoded, prepared, rows, labels, empty)
        self.step(f"image parity passed: min cosine {image_result.min_cosine:.6f}")
        if template.parts_joined:
            self._combined(
                model, tokenizer, images, run_language, sentences[:2], decoded[:2], prepared[:2], rows[:2], empty
            )

        converted = Converted(max_seq_length=max_length, strip_whitespace=False, parity=text_result)
        reference = model.encode(calibration.calibration_texts(), convert_to_numpy=True, prompt="")
        # Triton runs each request alone (``build_request_config``): the gateway's coalescer batches.
        fields = {**self.metadata_fields(model, loaded, converted), "dynamic_batching": False}
        return ModelMetadata(
            **fields,
            model_name=self.spec.model_name,
            embedding_dim=int(reference.shape[1]),
            normalized=any(type(module).__name__ == "Normalize" for module in route.modules),
            calibration=calibration.calibrate(reference),
            record=VisionLanguageMetadata(
                modalities=modalities(transformer), template=template, images=images, image_hidden=hidden,
                image_levels=levels, position_grid=grid_side, window_size=window,
                image_parity=image_result, pixel_max_error=pixel_error,
            ),
        )

    def _check_patches(self, transformer, images: PatchImages, decoded, prepared, labels) -> float:
        """The gateway's patches, normalized as the vision graph normalizes them, against the
        processor's pixel values (and its grids), each image alone; the largest difference."""
        worst = 0.0
        for image, (patches, grid), label in zip(decoded, prepared, labels):
            features = transformer.processor.image_processor([image], return_tensors="np")
            if [list(grid)] != features["image_grid_thw"].tolist():
                raise UnsupportedModelError(
                    f"unsupported {self.noun}: its image processor cuts the {label} into "
                    f"{features['image_grid_thw'].tolist()[0]} patches, the gateway into {list(grid)}"
                )
            error = float(np.abs(graphs.normalized_patches(patches, images) - features["pixel_values"]).max())
            if error > 1e-4:
                raise UnsupportedModelError(
                    f"unsupported {self.noun}: its image processor prepares the {label} otherwise than the gateway "
                    f"replays it (pixel values differ by up to {error:.4f})"
                )
            worst = max(worst, error)
        return worst

    def _check_token_ids(self, model, tokenizer: MessageTokenizer, sentences: list[str]) -> None:
        expected = self.reference_ids(model, sentences)
        batch = tokenizer.encode(sentences)
        ours = parity.reference_token_ids(batch.input_ids, batch.attention_mask)
        for row, (mine, theirs) in enumerate(zip(ours, expected)):
            if mine != theirs:
                raise ParityError(f"the gateway's token ids differ from the library's for parity sentence {row + 1}")

    def _texts(self, model, tokenizer, run, sentences: list[str], prompt: str, empty) -> ParityResult:
        from embedgate.contract.preprocess.prompted import PromptedText

        inputs = [PromptedText(prompt, text) if prompt else text for text in sentences]
        reference = model.encode(sentences, convert_to_numpy=True, prompt=prompt)

        def embed(rows: list) -> np.ndarray:
            batch = tokenizer.encode(rows)
            return run(_feeds(batch.input_ids, batch.attention_mask, text_positions(batch.attention_mask), [], empty))

        checks = {
            "as one padded batch": parity.cosines(embed(inputs), reference),
            "one sentence at a time": parity.cosines(np.concatenate([embed([one]) for one in inputs]), reference),
        }
        result, worst = parity.summarize(checks, self.spec.parity_threshold, len(sentences))
        if not result.passed:
            raise ParityError(
                f"parity check failed{' with a prompt' if prompt else ''}: min cosine {result.min_cosine:.6f} < "
                f"threshold {self.spec.parity_threshold} ({worst})"
            )
        return result

    def _images(self, model, tokenizer, images, run, decoded, prepared, rows, labels, empty) -> ImageParityResult:
        reference = model.encode(decoded, convert_to_numpy=True)
        batched = run(_language_feeds(tokenizer, images, [], prepared, rows, empty))
        alone = np.concatenate([
            run(_language_feeds(tokenizer, images, [], [one], [row], empty)) for one, row in zip(prepared, rows)
        ])
        cosines = np.concatenate([parity.cosines(batched, reference), parity.cosines(alone, reference)])
        worst = int(cosines.argmin())
        threshold = self.spec.parity_threshold
        if cosines[worst] < threshold:
            raise ParityError(
                f"image parity check failed: min cosine {cosines[worst]:.6f} < threshold {threshold} "
                f"({labels[worst % len(labels)]})"
            )
        return ImageParityResult(passed=True, threshold=threshold, min_cosine=float(cosines.min()), images=len(rows))

    def _combined(self, model, tokenizer, images, run, texts, decoded, prepared, rows, empty) -> None:
        """Inputs of a text and an image together, in either order, against ``encode`` of the
        library's dicts (the template writes the parts one after another: served so)."""
        inputs = [{"text": texts[0], "image": decoded[0]}, {"image": decoded[1], "text": texts[1]}]
        tokens = [images.tokens(grid) for _, grid in prepared]
        batch = tokenizer.encode_parts([[texts[0], tokens[0]], [tokens[1], texts[1]]])
        grids = [grid for _, grid in prepared]
        positions = token_positions(batch.attention_mask, tokenizer.image_tokens(batch), grids, images.merge_size)
        served = run(_feeds(batch.input_ids, batch.attention_mask, positions, list(rows), empty))
        cosines = parity.cosines(served, model.encode(inputs, convert_to_numpy=True))
        if cosines.min() < self.spec.parity_threshold:
            raise ParityError(
                f"parity check failed for an input of a text and an image: min cosine {cosines.min():.6f} < "
                f"threshold {self.spec.parity_threshold}"
            )
        self.step(f"text and image inputs: min cosine {cosines.min():.6f}")

    def configs(self, metadata: ModelMetadata) -> list[pb.ModelConfig]:
        record = metadata.record_of(VisionLanguageMetadata)
        assert record is not None
        language_name, vision_name = self.parts()
        options, rows = self.spec.triton, [record.image_levels, -1, record.image_hidden]
        patch = 3 * record.images.patch_size**2
        vision = [(PATCHES, pb.TYPE_UINT8, [-1, patch]), (POSITION_IDS, pb.TYPE_INT64, [-1, 2])]
        if record.position_grid:
            vision += [(INTERP_INDICES, pb.TYPE_INT64, [-1, 4]), (INTERP_WEIGHTS, pb.TYPE_FP32, [-1, 4])]
        if record.window_size:
            vision.append((WINDOW_IDS, pb.TYPE_INT64, [-1]))
        return [
            build_request_config(language_name, [
                (graphs.INPUT_IDS, pb.TYPE_INT64, [-1, -1]),
                (graphs.ATTENTION_MASK, pb.TYPE_INT64, [-1, -1]),
                (POSITION_IDS, pb.TYPE_INT64, [3, -1, -1]),
                (IMAGE_EMBEDS, pb.TYPE_FP32, rows),
            ], EMBEDDING, [-1, metadata.embedding_dim], options),
            build_request_config(vision_name, vision, IMAGE_EMBEDS, rows, options),
        ]


def _feeds(input_ids, attention_mask, positions, rows: list[np.ndarray], empty) -> dict[str, np.ndarray]:
    """``rows``: each image's ``[levels, tokens, hidden]``; ``empty``: (levels, hidden), for none."""
    return {
        graphs.INPUT_IDS: input_ids, graphs.ATTENTION_MASK: attention_mask, POSITION_IDS: positions,
        IMAGE_EMBEDS: np.concatenate(rows, axis=1) if rows else np.zeros((empty[0], 0, empty[1]), np.float32),
    }


def _language_feeds(tokenizer: MessageTokenizer, images: PatchImages, texts, prepared, rows, empty) -> dict:
    """Texts and images in one right-padded batch, as the gateway sends them (texts first)."""
    grids = [grid for _, grid in prepared]
    batch = tokenizer.encode(list(texts)) if texts else None
    pictures = tokenizer.encode_images([images.tokens(grid) for grid in grids]) if grids else None
    parts = [part for part in (batch, pictures) if part is not None]
    width = max(part.input_ids.shape[1] for part in parts)
    ids = np.concatenate([np.pad(part.input_ids, ((0, 0), (0, width - part.input_ids.shape[1]))) for part in parts])
    mask = np.concatenate([
        np.pad(part.attention_mask, ((0, 0), (0, width - part.input_ids.shape[1]))) for part in parts
    ])
    types = (ids == tokenizer.template.image_token_id).astype(np.int64) * mask
    return _feeds(ids, mask, token_positions(mask, types, grids, images.merge_size), list(rows), empty)
