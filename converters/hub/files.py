"""Which of a hub repository's files a conversion downloads: every file the libraries may
read, and none of the weights in formats they never load (TensorFlow, Flax, Rust, ONNX,
OpenVINO, Core ML, GGUF) nor a trainer's leftovers. Where a folder holds safetensors weights,
its pickled PyTorch weights (``*.bin``, ``*.pt``, ``*.pth``) are left too: the libraries
prefer the safetensors (sentence-transformers, transformers and open_clip alike), and a
repository often holds both, doubling the download."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from fnmatch import fnmatch

# Formats nothing in a conversion reads, by name or by folder.
IGNORED = (
    "*.h5", "*.msgpack", "*.ot", "*.tflite", "*.gguf", "*.onnx", "*.onnx_data", "*.onnx.data",
    "*.mlmodel", "onnx/*", "openvino/*", "coreml/*", "*.mlpackage/*",
    "optimizer.*", "scheduler.*", "rng_state*", "training_args.bin",
)
PICKLED_WEIGHTS = (".bin", ".pt", ".pth")


def ignored(path: str) -> bool:
    """Whether ``path`` (relative, ``/``-separated) is never needed: a hidden file
    (``.gitattributes``) or a format in IGNORED."""
    if any(part.startswith(".") for part in path.split("/")):
        return True
    return any(fnmatch(path, pattern) or fnmatch(posixpath.basename(path), pattern) for pattern in IGNORED)


def needed(paths: Iterable[str]) -> list[str]:
    """The files of ``paths`` a conversion downloads, sorted."""
    kept = [path for path in paths if not ignored(path)]
    with_safetensors = {posixpath.dirname(path) for path in kept if path.endswith(".safetensors")}
    return sorted(
        path for path in kept if not (path.endswith(PICKLED_WEIGHTS) and posixpath.dirname(path) in with_safetensors)
    )
