"""Fake converters behind the real ``python -m embedgate.converters`` entry point (staging,
configs, publishing, exit codes), for tests that must not load torch.

A runner script calls :func:`install` with the modules standing in for a library's kind;
each has ``convert(spec, *part_dirs, step) -> ModelMetadata``, as the kind's own converter
would fill its parts' directories.
"""

from __future__ import annotations

import importlib
from pathlib import Path


def tiny_onnx(path: Path, inputs: tuple[str, ...] = ("input_ids", "attention_mask")) -> Path:
    """A small, real ONNX graph (y = x @ w, w 32 x 32, x its first input; it declares the
    others, as the kind's config gives them) where a fake converter writes its model: the
    publish step rewrites every graph it publishes."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.eye(32, dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", [inputs[0], "w"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["n", 32]) for name in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 32])],
        [weight],
    )
    onnx.save(helper.make_model(graph), str(path))
    return path


def install(**modules: str) -> None:
    """``install(sentence_transformers="fake_converter", open_clip="fake_clip_converter")``."""
    from embedgate.converters import kinds
    from embedgate.converters.kinds.clip.converter import ClipConverter
    from embedgate.converters.kinds.dense.converter import DenseConverter

    real = kinds.converter_for

    def converter_for(spec, step):
        name = modules.get(spec.library)
        if name is None:
            return real(spec, step)
        fake = importlib.import_module(name)
        if spec.library == "open_clip":
            converter = ClipConverter(spec, step)
        else:
            converter = DenseConverter(spec, step, source=None, declared=None)
        converter.convert = lambda directories: fake.convert(spec, *directories, step)
        return converter

    kinds.converter_for = converter_for
