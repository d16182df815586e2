"""A multimodal sentence-transformer -> a text graph (with the tokenizer) and an image graph,
each checked against ``SentenceTransformer.encode`` on its own.

sentence-transformers 6 serves texts and images through one ``Transformer`` that reads its
modalities from the model's processor (``modalities.py``): a text runs the model's text
method, an image its image method, each then through the modules after it. Each is
exported as a graph of its own, the text graph as a dense model's (token ids in, the
tokenizer saved beside it and checked to give the model's ids) and the image graph taking
uint8 pixels the gateway prepares as the model's image processor does (``processor.py``,
recorded in ``metadata.json`` and checked against the processor's own pixel values). Both
must reach the cosine threshold against ``encode``, on the parity sentences (one past the
max length) and the parity images, as one batch and one by one.

A model that does not name its max length (a CLIP tokenizer saved without one) gets the
one its tokenizer or its text position embeddings imply, whichever is shorter, and the
library's reference is computed with that length.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2 as pb

from embedgate.contract.errors import UnsupportedModelError
from embedgate.contract.kinds.multimodal import KIND, MultimodalMetadata, ProcessorImages, multimodal_part_names
from embedgate.contract.spec import EMBEDDING, ONNX_FILE, PIXELS, GpuInfo, ImageParityResult, ModelMetadata
from embedgate.converters import calibration
from embedgate.converters.kinds.library import Converted, LibraryKind, Loaded
from embedgate.converters.kinds.multimodal import image_graph, modalities, processor
from embedgate.converters.library import gpu, image_parity, module_stack, parity
from embedgate.converters.library.routes import ModuleRoute
from embedgate.converters.triton_config import build_clip_image_config, build_text_model_config


class MultimodalConverter(LibraryKind):
    kind = KIND
    noun = "multimodal sentence-transformer"

    def parts(self) -> tuple[str, ...]:
        return multimodal_part_names(self.spec.triton_name)

    def route_refusal(self, route: ModuleRoute) -> str | None:
        transformer = route.modules[0]
        if not any(cls.__name__ == "Transformer" for cls in type(transformer).__mro__):
            return f"the first module is {type(transformer).__name__}, not a Transformer"
        reason = modalities.refusal(transformer)
        if reason is not None:
            return reason
        module_stack.text_transformer(route.modules)
        return None

    def max_length(self, model, modules: Sequence) -> int:
        return implied_max_length(modules[0])

    def convert(self, directories: Sequence[Path]) -> ModelMetadata:
        text_dir, image_dir = directories
        spec = self.spec
        loaded = self.load()
        model, route = loaded.model, loaded.routes[0]
        transformer = route.modules[0]
        images = processor.processor_images(transformer)
        max_length = self.max_length(model, route.modules)
        # The library then truncates where the gateway does (it would otherwise fail on a
        # text past the position embeddings).
        transformer.max_seq_length = max_length
        text = self._text(loaded, route, text_dir, max_length)
        image_result, image_dim, image_gpu, pixel_error = self._images(model, route.modules, images, image_dir / "1")
        dims = {text.extras["dim"], image_dim}
        if len(dims) > 1:
            raise UnsupportedModelError(
                f"unsupported {self.noun}: its text and image embeddings differ in size ({sorted(dims)})"
            )
        calibrated = calibration.calibrate(
            model.encode(calibration.calibration_texts(), convert_to_numpy=True, prompt="")
        )
        return ModelMetadata(
            **self.metadata_fields(model, loaded, text),
            model_name=spec.model_name,
            embedding_dim=text.extras["dim"],
            normalized=any(type(module).__name__ == "Normalize" for module in route.modules),
            calibration=calibrated,
            gpu=text.extras["gpu"],
            record=MultimodalMetadata(
                modalities=modalities.modalities(transformer),
                image=images,
                image_parity=image_result,
                pixel_max_error=pixel_error,
                image_gpu=image_gpu,
            ),
        )

    def _text(self, loaded: Loaded, route: ModuleRoute, text_dir: Path, max_length: int) -> Converted:
        spec, model = self.spec, loaded.model
        sentences = parity.parity_sentences(max_length)
        self.step("computing reference text embeddings with sentence-transformers")
        expected_ids = self.reference_ids(model, sentences)
        # The graph embeds the texts it is given; the gateway prepends any prompt.
        reference = model.encode(sentences, convert_to_numpy=True, prompt="")
        version_dir = text_dir / "1"
        exported = self.export_route(model, route, version_dir, text_dir, sentences, expected_ids, max_length)
        result = parity.check_embeddings(exported.onnx_file, exported.token_ids, reference, spec.parity_threshold)
        self.step(f"text parity passed: min cosine {result.min_cosine:.6f}")
        text_gpu = self.gpu_graph(
            route.modules, exported.example, version_dir,
            lambda run, half: parity.check_run(
                run, exported.token_ids, reference, spec.half_parity_threshold if half else spec.parity_threshold
            ),
            half=spec.gpu_float16, zero_token_types=exported.zero_token_types,
        )
        return Converted(
            max_seq_length=max_length,
            strip_whitespace=exported.strip_whitespace,
            parity=result,
            do_lower_case=self.do_lower_case(route.modules[0]),
            extras={"dim": int(reference.shape[1]), "gpu": text_gpu},
        )

    def _images(
        self, model, modules: Sequence, images: ProcessorImages, version_dir: Path
    ) -> tuple[ImageParityResult, int, GpuInfo | None, float]:
        """The image graph, checked: the replay of the processor against its own pixel
        values, the graph against ``encode``. Its parity, its embeddings' size, its GPU
        graph and the replay's largest pixel error."""
        import torch

        spec = self.spec
        labels, encoded = zip(*image_parity.parity_images())
        decoded = image_parity.decoded(encoded)
        self.step(f"computing reference image embeddings with sentence-transformers ({len(encoded)} images)")
        reference = model.encode(decoded, convert_to_numpy=True)
        expected = np.concatenate([modules[0].preprocess([image])["pixel_values"].numpy() for image in decoded])
        pixels = image_parity.gateway_pixels(encoded, images)
        self.step(f"checking the gateway's replay of {images.processor} ({images.backend} backend)")
        pixel_error = processor.check_replay(modules[0], images, pixels, expected, labels)
        self.step(f"exporting the image graph to ONNX ({images.height}x{images.width} pixels)")
        onnx_file = version_dir / ONNX_FILE
        image_graph.export_image_graph(modules, images, torch.from_numpy(pixels[:2]), onnx_file)
        self.step(f"image parity check on {len(encoded)} images")
        result = image_parity.check_images(onnx_file, pixels, reference, spec.parity_threshold, labels)
        self.step(f"image parity passed: min cosine {result.min_cosine:.6f}")
        image_gpu = None
        if self.on_gpu_instances():
            image_gpu = gpu.build_module(
                lambda dtype, device: image_graph.image_module(modules, images, dtype, device),
                [torch.from_numpy(pixels[:2])], version_dir,
                lambda run, half: image_parity.check_images(
                    run, pixels, reference, spec.half_parity_threshold if half else spec.parity_threshold, labels
                ),
                self.step, input_names=[PIXELS], half=spec.gpu_float16,
            )
        return result, int(reference.shape[1]), image_gpu, pixel_error

    def configs(self, metadata: ModelMetadata) -> list[pb.ModelConfig]:
        record = metadata.record_of(MultimodalMetadata)
        assert record is not None
        text_name, image_name = self.parts()
        options, dim = self.spec.triton, metadata.embedding_dim
        return [
            build_text_model_config(text_name, EMBEDDING, dim, options, max_width=metadata.max_seq_length),
            build_clip_image_config(image_name, record.image.height, record.image.width, dim, options),
        ]


def implied_max_length(transformer) -> int:
    """The most tokens a text keeps: the tokenizer's max length where it names one, at most
    the text model's position embeddings (a text past them fails in the library)."""
    named = transformer.max_seq_length
    config = transformer.auto_model.config
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    positions = getattr(text_config, "max_position_embeddings", None)
    known = [
        int(value) for value in (named, positions)
        if isinstance(value, int) and 0 < value <= module_stack.MAX_SUPPORTED_SEQ_LENGTH
    ]
    return module_stack.checked_max_length(min(known) if known else named)
