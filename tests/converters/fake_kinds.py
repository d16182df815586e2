"""Fake converters behind the real ``python -m embedgate.converters`` entry point (staging,
configs, publishing, exit codes), for tests that must not load torch.

A runner script calls :func:`install` with the modules standing in for a library's kind;
each has ``convert(spec, *part_dirs, step) -> ModelMetadata``, as the kind's own converter
would fill its parts' directories.
"""

from __future__ import annotations

import importlib


def install(**modules: str) -> None:
    """``install(sentence_transformers="fake_converter", open_clip="fake_clip_converter")``."""
    from embedgate.converters import kinds
    from embedgate.converters.kinds.clip import ClipConverter
    from embedgate.converters.kinds.dense import DenseConverter

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
