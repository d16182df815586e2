"""Make ``import torchvision`` work on a CPU-only torch with a CUDA-linked torchvision wheel.

PyPI's torchvision wheel (pulled in by open_clip_torch) carries a compiled extension that
does not load against the CPU build of torch. torchvision then fails at import while
registering fake kernels for ``torchvision::nms``/``qnms``, and transformers (which imports
torchvision when it is installed) fails with it. Defining the two operator schemas first
lets torchvision import; only its compiled ops stay unavailable, and nothing here uses them.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import sys

_checked = False
# Operator schemas live only as long as their Library object.
_library = None


def ensure_torchvision_importable() -> None:
    global _checked, _library
    if _checked:
        return
    _checked = True
    if "torchvision" in sys.modules:
        return
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        return
    import torch

    libraries = glob.glob(os.path.join(os.path.dirname(spec.origin), "_C*.so"))
    if not libraries:
        return
    try:
        torch.ops.load_library(libraries[0])
        return
    except OSError:
        pass
    _library = torch.library.Library("torchvision", "DEF")
    _library.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _library.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
