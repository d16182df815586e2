"""OpenCLIP model -> two ONNX towers, the tokenizer and the image preprocessing, checked for parity.

``model_name`` and ``pretrained`` are OpenCLIP's own: an architecture (``ViT-B-32``, or one
defined by a config file in ``clip_model_config_dir``) and a pretrained tag
(``laion2b_s34b_b79k``, fetched from the hub only when the network is allowed, else from
the local cache) or an absolute path to a checkpoint file; or a hub repository
(``hf-hub:org/name``, as open_clip names them), whose config is the architecture, served
under ``model_name``, downloaded as any hub model (``converters/hub/``). The text tower goes to
``text_dir`` with the tokenizer, the image tower to ``image_dir``; config.pbtxt,
metadata.json and publishing are the caller's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as pb

from embedgate.contract.errors import ConversionError, ModelNotFoundError, UnsupportedModelError
from embedgate.contract.kinds.clip import KIND, ClipMetadata, ImagePreprocessing
from embedgate.contract.sources import hub_repo
from embedgate.contract.spec import (
    INPUT_IDS,
    ONNX_FILE,
    PIXELS,
    TOKENIZER_DIR,
    ConversionSpec,
    ModelMetadata,
    clip_part_names,
)
from embedgate.converters import calibration
from embedgate.converters.kinds.base import KindConverter, Step
from embedgate.converters.kinds.clip import parity as clip_parity
from embedgate.converters.kinds.clip.export import export_image_tower, export_text_tower, image_tower, text_tower
from embedgate.converters.hub.snapshot import fetch
from embedgate.converters.kinds.clip.tokenizer import clip_text_spec, save_clip_tokenizer
from embedgate.converters.library import gpu
from embedgate.converters.triton_config import build_clip_image_config, build_clip_text_config


class ClipConverter(KindConverter):
    """Two Triton models, published together: the text tower (with the tokenizer), which
    makes the model visible, and the image tower."""

    kind = KIND

    def parts(self) -> tuple[str, ...]:
        return clip_part_names(self.spec.triton_name)

    def convert(self, directories: Sequence[Path]) -> ModelMetadata:
        text_dir, image_dir = directories
        return convert(self.spec, text_dir, image_dir, self.step)

    def configs(self, metadata: ModelMetadata) -> list[pb.ModelConfig]:
        clip = metadata.record_of(ClipMetadata)
        assert clip is not None
        text_name, image_name = self.parts()
        dim, options = metadata.embedding_dim, self.spec.triton
        size = clip.image
        return [
            build_clip_text_config(text_name, clip.text.context_length, dim, options),
            build_clip_image_config(image_name, size.height, size.width, dim, options),
        ]


# What a hub repository of an OpenCLIP model holds (open_clip's own names): its config, and
# its weights in one of these forms.
HUB_CONFIG = "open_clip_config.json"
CHECKPOINT_SUFFIXES = (".safetensors", ".bin", ".pth")


@dataclass(frozen=True)
class Loaded:
    model: object  # open_clip CLIP model, eval mode, float32
    preprocess: Callable  # OpenCLIP's eval transform (PIL image -> normalized tensor)
    tokenizer: object
    source: str  # recorded in metadata.json
    library_version: str


def convert(spec: ConversionSpec, text_dir: Path, image_dir: Path, step: Step) -> ModelMetadata:
    import torch

    started = time.monotonic()
    loaded = load(spec, step)
    model = loaded.model
    text = clip_text_spec(loaded.tokenizer, spec.model_name)
    preprocessing = image_preprocessing(model)
    sentences = clip_parity.clip_sentences(text.context_length)
    labels, images = zip(*clip_parity.parity_images())

    step("computing reference embeddings with open_clip")
    tokens = loaded.tokenizer(sentences)
    with torch.no_grad():
        text_reference = model.encode_text(tokens).float().numpy()
        calibrated = calibration.calibrate(
            model.encode_text(loaded.tokenizer(calibration.calibration_texts())).float().numpy()
        )
        image_inputs = torch.stack(clip_parity.reference_pixels(images, loaded.preprocess))
        image_reference = model.encode_image(image_inputs).float().numpy()
    pixels = clip_parity.gateway_pixels(images, preprocessing)

    step("exporting the text tower to ONNX")
    text_onnx = text_dir / "1" / ONNX_FILE
    export_text_tower(model, tokens[:2], text_onnx)
    step("exporting the image tower to ONNX")
    image_onnx = image_dir / "1" / ONNX_FILE
    export_image_tower(model, preprocessing, torch.from_numpy(pixels[:2]), image_onnx)

    step("saving tokenizer")
    tokenizer_file = save_clip_tokenizer(loaded.tokenizer, text_dir / TOKENIZER_DIR)

    step(f"parity check on {len(sentences)} sentences and {len(images)} images")
    threshold = spec.parity_threshold
    token_ids = clip_parity.check_tokenization(tokenizer_file, text, sentences, tokens.numpy())
    text_parity = clip_parity.check_text(text_onnx, token_ids, text_reference, threshold, sentences)
    image_parity = clip_parity.check_images(image_onnx, pixels, image_reference, threshold, labels)
    step(f"parity passed: min cosine text {text_parity.min_cosine:.6f}, image {image_parity.min_cosine:.6f}")
    text_gpu = image_gpu = None
    if spec.triton.form == "python" and spec.triton.instance_kind == "gpu":

        def judged(half: bool) -> float:
            return spec.half_parity_threshold if half else threshold

        text_gpu = gpu.build_module(
            lambda dtype, device: text_tower(model, dtype, device),
            [tokens[:2]], text_dir / "1",
            lambda run, half: clip_parity.check_text(run, token_ids, text_reference, judged(half), sentences),
            step, input_names=[INPUT_IDS], half=spec.gpu_float16,
        )
        image_gpu = gpu.build_module(
            lambda dtype, device: image_tower(model, preprocessing, dtype, device),
            [torch.from_numpy(pixels[:2])], image_dir / "1",
            lambda run, half: clip_parity.check_images(run, pixels, image_reference, judged(half), labels),
            step, input_names=[PIXELS], half=spec.gpu_float16,
        )

    return ModelMetadata(
        kind=KIND.name,
        model_name=spec.model_name,
        triton_name=spec.triton_name,
        source=loaded.source,
        library="open_clip",
        library_version=loaded.library_version,
        embedding_dim=int(text_reference.shape[1]),
        max_seq_length=text.context_length,
        normalized=False,
        form=spec.triton.form,
        max_batch_size=spec.triton.max_batch_size,
        dynamic_batching=spec.triton.dynamic_batching,
        instance_count=spec.triton.instance_count,
        parity=text_parity,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        conversion_seconds=round(time.monotonic() - started, 2),
        record=ClipMetadata(
            pretrained=spec.pretrained or "", text=text, image=preprocessing, image_parity=image_parity,
            image_gpu=image_gpu,
        ),
        calibration=calibrated,
        gpu=text_gpu,
    )


def load(spec: ConversionSpec, step: Step) -> Loaded:
    import open_clip

    if spec.clip_model_config_dir:
        open_clip.add_model_config(spec.clip_model_config_dir)
    pretrained = spec.pretrained or ""
    repo_id = hub_repo(pretrained)
    if repo_id is not None:
        return _load_from_hub(spec, repo_id, step)
    if spec.model_name not in open_clip.list_models():
        raise ModelNotFoundError(
            f"{spec.model_name!r} is not an OpenCLIP architecture (open_clip.list_models() lists them)"
        )
    if open_clip.get_pretrained_cfg(spec.model_name, pretrained):
        source = f"open_clip:{spec.model_name}/{pretrained}"
    elif os.path.isabs(pretrained) and os.path.isfile(pretrained):
        source = f"checkpoint:{pretrained}"
    else:
        raise ModelNotFoundError(
            f"pretrained {pretrained!r} is neither a pretrained tag of {spec.model_name}, an absolute path to a "
            "checkpoint file nor a hub repository ('hf-hub:org/name')"
        )
    step(f"loading {spec.model_name} from {source}")
    try:
        model, _, preprocess = open_clip.create_model_and_transforms(
            spec.model_name, pretrained=pretrained, device="cpu"
        )
    except Exception as error:
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        if source.startswith("open_clip:"):
            raise ModelNotFoundError(
                f"cannot get weights {pretrained!r} of {spec.model_name} (offline and not cached?): {first_line}"
            ) from error
        raise ConversionError(f"the checkpoint does not fit {spec.model_name}: {first_line}") from error
    tokenizer = open_clip.get_tokenizer(spec.model_name)
    # Checkpoints stored in half precision still serve float32 embeddings.
    return Loaded(model.float().eval(), preprocess, tokenizer, source, open_clip.__version__)


def _load_from_hub(spec: ConversionSpec, repo_id: str, step: Step) -> Loaded:
    """A hub repository as open_clip loads an ``hf-hub:`` name (its ``open_clip_config.json``:
    the architecture and the image preprocessing; its weights), from its snapshot in the hub
    cache (``converters/hub/``): the architecture is the repository's, ``model_name`` the name
    it is served by."""
    import open_clip

    snapshot = fetch(repo_id, spec.revision, allow_network=spec.allow_network, report=step)
    if not (snapshot.path / HUB_CONFIG).is_file() or not any(
        path.suffix in CHECKPOINT_SUFFIXES for path in snapshot.path.iterdir()
    ):
        raise ModelNotFoundError(
            f"the hub repository '{repo_id}' is no OpenCLIP model: it needs {HUB_CONFIG} and the weights beside it"
        )
    step(f"loading {spec.model_name} from {snapshot.described()}")
    # open_clip's own name for a directory laid out as a hub repository.
    local = f"local-dir:{snapshot.path}"
    try:
        model, _, preprocess = open_clip.create_model_and_transforms(local, device="cpu")
        tokenizer = open_clip.get_tokenizer(local)
    except Exception as error:
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        first_line = first_line.replace(str(snapshot.path), repo_id)
        raise ConversionError(f"open_clip cannot load the hub repository '{repo_id}': {first_line}") from error
    return Loaded(model.float().eval(), preprocess, tokenizer, snapshot.described(), open_clip.__version__)


def image_preprocessing(model) -> ImagePreprocessing:
    import open_clip

    config = open_clip.get_model_preprocess_cfg(model)
    size = config["size"]
    height, width = (size, size) if isinstance(size, int) else tuple(size)

    def triple(value) -> tuple[float, float, float]:
        values = tuple(float(v) for v in value) if isinstance(value, (list, tuple)) else (float(value),) * 3
        if len(values) != 3:
            raise UnsupportedModelError(f"unsupported model: {len(values)}-channel image normalization")
        return values

    return ImagePreprocessing(
        height=height,
        width=width,
        resize_mode=config.get("resize_mode", "shortest"),
        # OpenCLIP's "random" means bicubic at inference time.
        interpolation="bilinear" if config.get("interpolation") == "bilinear" else "bicubic",
        fill_color=int(config.get("fill_color", 0)),
        mean=triple(config["mean"]),
        std=triple(config["std"]),
    )
