"""``python -m embedgate.converters``: run one conversion; a ``ConversionSpec`` JSON arrives on stdin.

Protocol with the gateway:

- stderr: one progress line per step, ``[  3.2s] step description`` (seconds since start),
  plus library output and, on failure, the traceback;
- stdout: exactly one line, the last: the ``ModelMetadata`` JSON (as in metadata.json) on
  success, ``{"error": "<one line>"}`` on failure;
- exit code: 0 published, 1 other failure, 2 model not found or not loadable,
  3 parity check failed, 4 target exists (and ``replace`` is false), 5 out of memory,
  6 no space left for the model, 7 repository unreachable or refusing (S3),
  130/143 interrupted/terminated (staging removed, partial uploads deleted).
"""

from __future__ import annotations

import errno
import importlib
import json
import os
import signal
import sys
import time
import traceback
from importlib import resources
from pathlib import Path
from typing import TextIO

from pydantic import ValidationError

from embedgate.converters.errors import ConversionError, DiskFullError, OutOfMemoryError
from embedgate.converters.repository import ModelRepository, open_repository
from embedgate.converters.spec import METADATA_FILE, ConversionSpec, ModelMetadata, clip_part_names, variant_model_name
from embedgate.converters.triton_config import (
    build_clip_image_config,
    build_clip_text_config,
    build_text_model_config,
    render,
    validate_options,
)

CONFIG_FILE = "config.pbtxt"
# The Python-backend model Triton runs; every python-form model gets a copy as 1/model.py.
PYTHON_BACKEND_MODEL = resources.files("embedgate.api.triton") / "python_backend_model.py"
# kind -> module (in this package) with convert(spec, out_dir, step) -> ModelMetadata (for "clip":
# convert(spec, text_dir, image_dir, step)); imported on demand because each pulls in
# torch and its model library.
CONVERTERS = {"sentence_transformer": ".sentence_transformer", "clip": ".open_clip"}
MAX_ERROR_CHARS = 500


class Progress:
    def __init__(self) -> None:
        self.started = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def __call__(self, message: str) -> None:
        print(f"[{self.elapsed():5.1f}s] {message}", file=sys.stderr, flush=True)


class Cancelled(BaseException):
    exit_code = 143


def run(spec: ConversionSpec, step: Progress) -> ModelMetadata:
    try:
        validate_options(spec.triton)
    except ValueError as error:
        raise ConversionError(f"invalid Triton options: {error}") from error
    _configure_hub_access(spec.allow_network)
    converter = importlib.import_module(CONVERTERS[spec.kind], __package__)
    repository = open_repository(spec.repository, spec.repository_cache_dir)
    if spec.kind == "clip":
        return _run_clip(spec, repository, converter, step)

    with repository.stage(spec.triton_name, replace=spec.replace) as stage:
        metadata: ModelMetadata = converter.convert(spec, stage.path, step)
        step("writing config")
        config = build_text_model_config(spec.triton_name, metadata.embedding_dim, spec.triton)
        _write_model_files(stage.path, render(config), spec)
        metadata.conversion_seconds = round(step.elapsed(), 2)
        (stage.path / METADATA_FILE).write_text(metadata.model_dump_json(indent=2) + "\n", encoding="utf-8")
        step(f"publishing to {stage.target}")
        stage.publish()
    return metadata


def _run_clip(spec: ConversionSpec, repository: ModelRepository, converter, step: Progress) -> ModelMetadata:
    """Two Triton models, published together: the image tower first, then the text tower
    (with the tokenizer), whose arrival makes the model visible; if the second publish
    fails the first is taken back."""
    text_name, image_name = clip_part_names(spec.triton_name)
    with (
        repository.stage(text_name, replace=spec.replace) as text,
        repository.stage(image_name, replace=spec.replace) as image,
    ):
        metadata: ModelMetadata = converter.convert(spec, text.path, image.path, step)
        assert metadata.clip is not None
        step("writing configs")
        dim, options = metadata.embedding_dim, spec.triton
        context_length, size = metadata.clip.text.context_length, metadata.clip.image
        _write_model_files(text.path, render(build_clip_text_config(text_name, context_length, dim, options)), spec)
        _write_model_files(
            image.path, render(build_clip_image_config(image_name, size.height, size.width, dim, options)), spec
        )
        metadata.conversion_seconds = round(step.elapsed(), 2)
        for stage in (text, image):
            (stage.path / METADATA_FILE).write_text(metadata.model_dump_json(indent=2) + "\n", encoding="utf-8")
        step(f"publishing to {image.target} and {text.target}")
        image.publish()
        try:
            text.publish()
        except BaseException:
            repository.delete(image_name)
            raise
    return metadata


def _write_model_files(directory: Path, config: str, spec: ConversionSpec) -> None:
    (directory / CONFIG_FILE).write_text(config, encoding="utf-8")
    if spec.triton.form == "python":
        (directory / "1" / "model.py").write_bytes(PYTHON_BACKEND_MODEL.read_bytes())


def main() -> int:
    step = Progress()
    result = _claim_stdout()
    signal.signal(signal.SIGTERM, _cancel)
    try:
        spec = _read_spec(sys.stdin.read())
        name = variant_model_name(spec.model_name, spec.variant)
        step(f"converting {name} ({spec.kind}) into {spec.repository}/{spec.triton_name}")
        metadata = run(spec, step)
    except ConversionError as error:
        traceback.print_exc()
        return _fail(result, step, _one_line(str(error)), error.exit_code)
    except (Cancelled, KeyboardInterrupt) as error:
        return _fail(result, step, "conversion cancelled", getattr(error, "exit_code", 130))
    except Exception as error:  # noqa: BLE001 - every failure must still answer in JSON
        traceback.print_exc()
        if _out_of_memory(error):
            oom = OutOfMemoryError("conversion ran out of memory; nothing was published")
            return _fail(result, step, str(oom), oom.exit_code)
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            full = DiskFullError("no space left to write the model; nothing was published")
            return _fail(result, step, str(full), full.exit_code)
        message = f"conversion failed: {type(error).__name__}: {_one_line(str(error))}"
        return _fail(result, step, message, 1)
    step("done")
    _emit(result, metadata.model_dump_json())
    return 0


# How running out of memory shows when it is not a MemoryError: a shared library or a
# weights file that cannot be mapped, or a C++ allocation failure.
_OOM_MARKERS = ("cannot allocate memory", "failed to map segment", "bad_alloc", "out of memory")


def _out_of_memory(error: BaseException) -> bool:
    if isinstance(error, MemoryError) or getattr(error, "errno", None) == errno.ENOMEM:
        return True
    text = str(error).lower()
    return any(marker in text for marker in _OOM_MARKERS)


def _read_spec(text: str) -> ConversionSpec:
    try:
        return ConversionSpec.model_validate_json(text)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in item['loc']) or 'spec'}: {item['msg']}" for item in error.errors()
        )
        raise ConversionError(f"invalid conversion spec: {problems}") from error


def _configure_hub_access(allow_network: bool) -> None:
    # huggingface_hub and transformers read these once, at import: set them first.
    if not allow_network:
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    # Progress bars would interleave with our progress lines on stderr.
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _claim_stdout() -> TextIO:
    """Keep the real stdout for the result line; send everything else written there to stderr.

    Done on the file descriptor, so prints from C extensions are redirected too.
    """
    sys.stdout.flush()
    result_fd = os.dup(1)
    os.dup2(2, 1)
    return os.fdopen(result_fd, "w", encoding="utf-8")


def _cancel(signum: int, frame: object) -> None:
    # Raising unwinds through Staging's with-block, which removes the staging directory.
    raise Cancelled()


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MAX_ERROR_CHARS else line[: MAX_ERROR_CHARS - 3] + "..."


def _fail(result: TextIO, step: Progress, message: str, exit_code: int) -> int:
    step(f"failed: {message}")
    _emit(result, json.dumps({"error": message}))
    return exit_code


def _emit(result: TextIO, line: str) -> None:
    result.write(line + "\n")
    result.flush()


if __name__ == "__main__":
    sys.exit(main())
