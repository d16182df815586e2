"""A multimodal sentence-transformer's image graph: uint8 pixels ``[batch, height, width, 3]``
(RGB, as the gateway prepares them) -> ``embedding``.

Its first nodes are the processor's rescaling and normalization, in the form its torchvision
backend computes them (``(x - mean / scale) / (std / scale)`` on float32 pixels), so the
gateway sends a quarter of the bytes float32 would take and cannot normalize differently.
Then the model's modules, as ``encode`` runs them for an image: the Transformer with the
``image`` modality (``get_image_features``), and what follows it (Normalize...).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from embedgate.contract.kinds.multimodal import ProcessorImages
from embedgate.contract.spec import EMBEDDING, PIXELS
from embedgate.converters.library import module_stack

PIXEL_VALUES = "pixel_values"
SENTENCE_EMBEDDING = "sentence_embedding"


def image_graph(modules: Sequence, images: ProcessorImages):
    import torch

    scale = images.rescale if images.rescale is not None else 1.0
    mean = images.mean if images.mean is not None else (0.0, 0.0, 0.0)
    std = images.std if images.std is not None else (1.0, 1.0, 1.0)

    class ImageGraph(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stack = torch.nn.ModuleList(list(modules))
            self.register_buffer("offset", torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1) / scale)
            self.register_buffer("divisor", torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1) / scale)

        def forward(self, pixels):
            values = pixels.permute(0, 3, 1, 2).to(self.offset.dtype)
            features = {PIXEL_VALUES: (values - self.offset) / self.divisor, "modality": "image"}
            for module in self.stack:
                features = module(features)
            return features[SENTENCE_EMBEDDING].to(torch.float32)

    return ImageGraph().eval()


def image_module(modules: Sequence, images: ProcessorImages, dtype, device: str):
    """The image graph over a copy of ``modules`` in ``dtype`` on ``device``: what GPU
    instances trace (``converters/library/gpu.py``)."""
    import copy

    return image_graph([copy.deepcopy(module) for module in modules], images).to(device=device, dtype=dtype)


def export_image_graph(modules: Sequence, images: ProcessorImages, example_pixels, onnx_file: Path) -> None:
    """The image graph as ONNX, a dynamic batch axis; a failure says where the export stopped."""
    module_stack.export_graph(
        image_graph(modules, images), {PIXELS: example_pixels}, onnx_file, modules,
        input_names=[PIXELS], output_name=EMBEDDING, fixed_shape=True,
    )
