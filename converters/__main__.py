"""``python -m embedgate.converters``: run one conversion; a ``ConversionSpec`` JSON arrives on stdin.

Protocol with the gateway:

- stderr: one progress line per step, ``[  3.2s] step description`` (seconds since start),
  a step's numbers after a tab as a JSON object where it has some (a download's files and
  bytes: ``converters/hub/progress.py``), plus library output and, on failure, the traceback;
- stdout: exactly one line, the last: the ``ModelMetadata`` JSON (as in metadata.json) on
  success, ``{"error": "<one line>"}`` on failure;
- exit code: 0 published, 1 other failure, 2 model not found or not loadable,
  3 parity check failed, 4 target exists (and ``replace`` is false), 5 out of memory,
  6 no space left for the model, 7 repository unreachable or refusing (S3), 8 a model of a
  kind that cannot be served as asked (its kind, custom code, a variant of a non-dense model),
  9 the model's own code refused (no trust_remote_code), 10 not on this host and downloads
  from the hub off, 11 the hub refused a gated or private model, 12 the hub timed out, 13 the
  hub unreachable or failing (``converters/hub/``),
  130/143 interrupted/terminated (staging removed, partial uploads deleted).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sys
import time
import traceback
from contextlib import ExitStack
from importlib import resources
from pathlib import Path
from typing import TextIO

from pydantic import ValidationError

from embedgate.contract.errors import ConversionError, DiskFullError, OutOfMemoryError
from embedgate.contract.repository import ModelRepository, open_repository
from embedgate.contract.sources import ModelSource, made_from
from embedgate.contract.spec import METADATA_FILE, ConversionSpec, ModelMetadata, variant_model_name
from embedgate.converters import graph_inputs, hub_access, kinds, weights
from embedgate.converters.triton_config import render, validate_options

CONFIG_FILE = "config.pbtxt"
# The Python-backend model Triton runs: every python-form model gets a copy of each file
# in its version directory (1/model.py and the module it imports).
PYTHON_BACKEND_FILES = {
    name: resources.files("embedgate.python_backend") / name for name in ("model.py", "batch_layout.py", "torch_graphs.py")
}
MAX_ERROR_CHARS = 500


class Progress:
    def __init__(self) -> None:
        self.started = time.monotonic()
        # The step in progress, for a failure that has no words of its own.
        self.last = "starting"

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def __call__(self, message: str, data: dict | None = None) -> None:
        self.last = message
        numbers = f"\t{json.dumps(data, separators=(',', ':'))}" if data else ""
        print(f"[{self.elapsed():5.1f}s] {message}{numbers}", file=sys.stderr, flush=True)


class Cancelled(BaseException):
    exit_code = 143


def run(spec: ConversionSpec, step: Progress) -> ModelMetadata:
    try:
        validate_options(spec.triton)
    except ValueError as error:
        raise ConversionError(f"invalid Triton options: {error}") from error
    hub_access.configure(spec.allow_network)
    repository = open_repository(spec.repository, spec.repository_cache_dir)
    converter = kinds.converter_for(spec, step)
    names = converter.parts()
    source = _made_from(spec)
    with ExitStack() as staged:
        stages = [staged.enter_context(repository.stage(name, replace=spec.replace)) for name in names]
        metadata = converter.convert([stage.path for stage in stages])
        # A part asked for that the model could not have (a late-chunking graph) is not
        # published, and an older copy's is taken away.
        published = converter.published_parts(metadata)
        for name in names:
            if name not in published and spec.replace and repository.exists(name):
                repository.delete(name)
        stages = [stage for name, stage in zip(names, stages) if name in published]
        names = published
        # A hub model the load just downloaded had no files to fingerprint before it.
        metadata.made_from = source if source.fingerprint is not None else _made_from(spec)
        configs = converter.configs(metadata)
        if configs:
            metadata.graph_inputs = graph_inputs.recorded(names, [stage.path for stage in stages], configs)
            step("writing config" if len(stages) == 1 else "writing configs")
            for stage, config in zip(stages, configs, strict=True):
                _write_model_files(stage.path, render(config), spec)
        else:
            step("no Triton model: the gateway computes it from its static weights")
        metadata.conversion_seconds = round(step.elapsed(), 2)
        for stage in stages:
            (stage.path / METADATA_FILE).write_text(metadata.model_dump_json(indent=2) + "\n", encoding="utf-8")
        _publish(repository, names, stages, step)
    return metadata


def _made_from(spec: ConversionSpec) -> ModelSource:
    """What the conversion reads, fingerprinted before it reads the weights: files that
    change while it runs then differ from the record, and the next load converts again,
    where a record taken after could name files the model was not made from."""
    return made_from(spec.library, spec.model_name, spec.model_path, spec.pretrained, spec.revision)


def _publish(repository: ModelRepository, names: tuple[str, ...], stages: list, step: Progress) -> None:
    """The parts in reverse: the first, whose arrival makes the model visible, last; if one
    fails, those already published are taken back."""
    step("publishing to " + " and ".join(str(stage.target) for stage in reversed(stages)))
    published: list[str] = []
    try:
        for name, stage in reversed(list(zip(names, stages))):
            stage.publish()
            published.append(name)
    except BaseException:
        for name in published:
            repository.delete(name)
        raise


def _write_model_files(directory: Path, config: str, spec: ConversionSpec) -> None:
    (directory / CONFIG_FILE).write_text(config, encoding="utf-8")
    if spec.triton.form == "python":
        # Every version (a model with a Router has one per route) runs its own model.py.
        for version in _versions(directory):
            for name, source in PYTHON_BACKEND_FILES.items():
                (version / name).write_bytes(source.read_bytes())
            # Weights beside the graph, mapped from the page cache: shared by every process
            # that opens the graph (GPU instances, and the same model loaded twice).
            for graph in sorted(version.glob("*.onnx")):
                weights.externalize(graph)


def _versions(directory: Path) -> list[Path]:
    """A staged model's Triton version directories (1/, 2/...)."""
    versions = [path for path in directory.iterdir() if path.is_dir() and path.name.isdigit()]
    return sorted(versions, key=lambda path: int(path.name))


def main() -> int:
    step = Progress()
    result = _claim_stdout()
    signal.signal(signal.SIGTERM, _cancel)
    try:
        spec = _read_spec(sys.stdin.read())
        name = variant_model_name(spec.model_name, spec.variant)
        step(f"converting {name} ({spec.library}) into {spec.repository}/{spec.triton_name}")
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
        # An error with no words for a user: at least the step it stopped in.
        message = f"conversion failed while {step.last}: {type(error).__name__}: {_one_line(str(error))}"
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
