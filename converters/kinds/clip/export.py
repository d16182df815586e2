"""An OpenCLIP model's two towers exported as two ONNX graphs with a dynamic batch axis.

- text: ``input_ids`` int64 ``[batch, context_length]`` -> ``embedding`` (``encode_text``,
  not normalized). The length is fixed: CLIP text towers add a positional embedding of
  exactly the context length.
- image: ``pixels`` uint8 ``[batch, height, width, 3]`` (RGB, as decoded) -> ``embedding``
  (``encode_image``, not normalized). Scaling to [0, 1] and the mean/std normalization of
  OpenCLIP's ``ToTensor`` + ``Normalize`` are the first nodes of the graph, so the gateway
  sends a quarter of the bytes float32 would take and cannot normalize differently.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from embedgate.contract.kinds.clip import ImagePreprocessing
from embedgate.contract.spec import EMBEDDING, INPUT_IDS, PIXELS

OPSET = 17


def _text_graph(model):
    import torch

    class TextTower(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids):
            return self.model.encode_text(input_ids).to(torch.float32)

    return TextTower().eval()


def _image_graph(model, preprocessing: ImagePreprocessing):
    import torch

    class ImageTower(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model
            self.register_buffer("mean", torch.tensor(preprocessing.mean, dtype=torch.float32).view(1, 3, 1, 1))
            self.register_buffer("std", torch.tensor(preprocessing.std, dtype=torch.float32).view(1, 3, 1, 1))

        def forward(self, pixels):
            # ToTensor (HWC uint8 -> CHW in [0, 1]) then Normalize, as OpenCLIP's transform,
            # in the model's dtype (float16 on GPU instances, where parity allows).
            images = pixels.permute(0, 3, 1, 2).to(self.mean.dtype).div(255)
            return self.model.encode_image((images - self.mean) / self.std).to(torch.float32)

    return ImageTower().eval()


def text_tower(model, dtype, device: str):
    """The text tower as a module of its own (a copy of ``model``) in ``dtype`` on ``device``:
    what GPU instances trace (``converters/library/gpu.py``)."""
    import copy

    return _text_graph(copy.deepcopy(model).to(device=device, dtype=dtype))


def image_tower(model, preprocessing: ImagePreprocessing, dtype, device: str):
    """The image tower, likewise (pixels uint8 in, normalized in ``dtype``)."""
    import copy

    return _image_graph(copy.deepcopy(model), preprocessing).to(device=device, dtype=dtype)


def export_text_tower(model, example_ids, onnx_file: Path) -> None:
    _export(_text_graph(model), example_ids, INPUT_IDS, onnx_file)


def export_image_tower(model, preprocessing: ImagePreprocessing, example_pixels, onnx_file: Path) -> None:
    _export(_image_graph(model, preprocessing), example_pixels, PIXELS, onnx_file)


def _export(graph, example, input_name: str, onnx_file: Path) -> None:
    import onnx
    import torch

    onnx_file.parent.mkdir(parents=True, exist_ok=True)
    # nn.MultiheadAttention's inference fast path is one fused operator ONNX has no
    # equivalent for; the regular path exports as plain matrix products.
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    with torch.no_grad(), warnings.catch_warnings():
        # The tracer warns about shape-dependent Python branches; the parity check decides.
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(
                graph,
                (example,),
                str(onnx_file),
                input_names=[input_name],
                output_names=[EMBEDDING],
                dynamic_axes={input_name: {0: "batch"}, EMBEDDING: {0: "batch"}},
                opset_version=OPSET,
                do_constant_folding=True,
                dynamo=False,
            )
        finally:
            torch.backends.mha.set_fastpath_enabled(fastpath)
    onnx.checker.check_model(str(onnx_file))
