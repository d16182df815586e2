"""A multimodal Transformer's image processor, read as what the gateway replays (the
contract's ``ProcessorImages``), or refused where the gateway cannot replay it exactly.

A Hugging Face image processor whose class only sets defaults on its backend
(``TorchvisionBackend`` or ``PilBackend``: ``CLIPImageProcessor``, ``SiglipImageProcessor``,
``BlipImageProcessor``, ``ViTImageProcessor``) prepares every image with the backend's one
``preprocess``: RGB, resize, center crop, rescale, normalize, each where its settings say.
The gateway replays that (``contract/preprocess/processor_images.py``); a class with code of
its own (ConvNeXT's crop percentage, Qwen2-VL's patches) is refused. So are settings whose
result is not one image size (a resize of the short side without a crop), padding to the
batch's largest image, and images not converted to RGB. Whatever passes is then checked
against the processor's own pixel values (``check_replay``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from embedgate.contract.errors import UnsupportedModelError
from embedgate.contract.kinds.multimodal import ProcessorImages

# PIL's resampling filters, by the number an image processor's config stores.
_INTERPOLATIONS = {3: "bicubic", 2: "bilinear"}
# The largest difference from the processor's own pixel values (normalized) a replay may
# have: float rounding is about 1e-6; one level of one pixel is 1 / 255 / std (> 0.007).
PIXEL_TOLERANCE = 1e-3


def refused(transformer, reason: str) -> UnsupportedModelError:
    processor = type(getattr(transformer.processor, "image_processor", transformer.processor)).__name__
    return UnsupportedModelError(
        f"unsupported multimodal sentence-transformer: its image processor ({processor}) {reason}; "
        "nothing was published"
    )


def processor_images(transformer) -> ProcessorImages:
    """How the gateway prepares an image for ``transformer`` (a sentence-transformers
    Transformer that takes images), or UnsupportedModelError saying why it cannot."""
    from transformers.image_processing_backends import PilBackend, TorchvisionBackend

    image_processor = getattr(transformer.processor, "image_processor", None)
    if image_processor is None:
        raise refused(transformer, "is not one of a processor with an image processor")
    backends = {TorchvisionBackend: "torchvision", PilBackend: "pil"}
    base = next((cls for cls in type(image_processor).__mro__ if cls in backends), None)
    if base is None:
        raise refused(transformer, "is of neither the torchvision nor the PIL backend of transformers")
    own = own_code(type(image_processor), base)
    if own:
        raise refused(transformer, f"prepares images in code of its own ({', '.join(own)}), which the gateway does not replay")
    overrides = {key: value for key, value in transformer.processing_kwargs.items() if key in ("image", "common") and value}
    if overrides:
        raise refused(transformer, f"is called with settings of the model's own ({overrides}), which the gateway does not replay")
    if not image_processor.do_convert_rgb:
        raise refused(transformer, "does not convert images to RGB (the gateway serves 3-channel images only)")
    if image_processor.do_pad:
        raise refused(transformer, "pads images to the largest of a batch, so an image's pixels depend on the others'")
    fields = {"processor": type(image_processor).__name__, "backend": backends[base], **_resize(transformer, image_processor)}
    fields.update(_crop(transformer, image_processor, fields))
    fields.update(_normalization(image_processor))
    return ProcessorImages(**fields)


def own_code(cls: type, base: type) -> list[str]:
    """Methods the classes between ``cls`` and its backend ``base`` define (``__init__``,
    which only sets defaults, and the types of their settings aside)."""
    found = []
    for klass in cls.__mro__:
        if klass is base:
            break
        found += [
            key for key, value in vars(klass).items()
            if callable(value) and not isinstance(value, type) and key != "__init__"
        ]
    return found


def _resize(transformer, image_processor) -> dict:
    if not image_processor.do_resize:
        return {}
    size = image_processor.size
    interpolation = _INTERPOLATIONS.get(int(image_processor.resample)) if image_processor.resample is not None else "bilinear"
    if interpolation is None:
        raise refused(transformer, f"resizes with filter {image_processor.resample!r}; the gateway replays bicubic and bilinear")
    if size.shortest_edge and not size.longest_edge:
        return {"shortest_edge": int(size.shortest_edge), "interpolation": interpolation}
    if size.height and size.width and not size.shortest_edge:
        return {"resize_height": int(size.height), "resize_width": int(size.width), "interpolation": interpolation}
    raise refused(transformer, f"resizes to {dict(size.items()) if hasattr(size, 'items') else size}, which the gateway does not replay")


def _crop(transformer, image_processor, resize: dict) -> dict:
    if image_processor.do_center_crop:
        crop = image_processor.crop_size
        return {"crop_height": int(crop.height), "crop_width": int(crop.width), "height": int(crop.height), "width": int(crop.width)}
    if "resize_height" in resize:
        return {"height": resize["resize_height"], "width": resize["resize_width"]}
    raise refused(transformer, "leaves images of different sizes (no resize to one size, no crop); the image graph takes one")


def _normalization(image_processor) -> dict:
    def triple(value) -> tuple[float, float, float]:
        values = tuple(float(v) for v in value) if isinstance(value, (list, tuple)) else (float(value),) * 3
        if len(values) != 3:
            raise UnsupportedModelError(f"unsupported multimodal sentence-transformer: {len(values)}-channel normalization")
        return values

    return {
        "rescale": float(image_processor.rescale_factor) if image_processor.do_rescale else None,
        "mean": triple(image_processor.image_mean) if image_processor.do_normalize else None,
        "std": triple(image_processor.image_std) if image_processor.do_normalize else None,
    }


def normalized(pixels: np.ndarray, images: ProcessorImages) -> np.ndarray:
    """uint8 pixels ``[n, h, w, 3]`` as the image graph normalizes them, ``[n, 3, h, w]``:
    what the processor's ``pixel_values`` are."""
    values = pixels.astype(np.float32).transpose(0, 3, 1, 2)
    if images.rescale is not None:
        values = values * np.float32(images.rescale)
    if images.mean is not None and images.std is not None:
        mean = np.asarray(images.mean, dtype=np.float32).reshape(1, 3, 1, 1)
        std = np.asarray(images.std, dtype=np.float32).reshape(1, 3, 1, 1)
        values = (values - mean) / std
    return values


def check_replay(
    transformer, images: ProcessorImages, pixels: np.ndarray, expected: np.ndarray, labels: Sequence[str]
) -> float:
    """The largest difference between the gateway's prepared ``pixels`` (normalized) and the
    processor's own pixel values ``expected``, each image alone; UnsupportedModelError past
    :data:`PIXEL_TOLERANCE`, naming the image."""
    ours = normalized(pixels, images)
    if ours.shape != expected.shape:
        raise refused(transformer, f"gives pixel values of shape {list(expected.shape)}, the replay {list(ours.shape)}")
    errors = np.abs(ours - expected.astype(np.float32)).reshape(len(ours), -1).max(axis=1)
    worst = int(errors.argmax())
    if errors[worst] > PIXEL_TOLERANCE:
        raise refused(
            transformer,
            f"prepares images otherwise than the gateway replays it (the {labels[worst]}: pixel values differ by "
            f"up to {errors[worst]:.4f})",
        )
    return float(errors.max())
