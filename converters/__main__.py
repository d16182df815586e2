"""``python -m converters``: run one conversion; a ``ConversionSpec`` JSON arrives on stdin.

Protocol with the gateway:

- stderr: one progress line per step, ``[  3.2s] step description`` (seconds since start),
  plus library output and, on failure, the traceback;
- stdout: exactly one line, the last: the ``ModelMetadata`` JSON (as in metadata.json) on
  success, ``{"error": "<one line>"}`` on failure;
- exit code: 0 published, 1 other failure, 2 model not found or not loadable,
  3 parity check failed, 4 target exists (and ``replace`` is false),
  130/143 interrupted/terminated (staging removed).
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import TextIO

from pydantic import ValidationError

from converters.errors import ConversionError
from converters.publish import Staging
from converters.spec import METADATA_FILE, ConversionSpec, ModelMetadata
from converters.triton_config import build_text_model_config, render, validate_options

CONFIG_FILE = "config.pbtxt"
PYTHON_MODEL_TEMPLATE = Path(__file__).parent / "templates" / "python_model.py"
# kind -> module with convert(spec, out_dir, step) -> ModelMetadata; imported on demand
# because each pulls in torch and its model library.
CONVERTERS = {"sentence_transformer": "converters.sentence_transformer"}
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
    converter = importlib.import_module(CONVERTERS[spec.kind])

    with Staging(spec.repository, spec.triton_name, replace=spec.replace) as stage:
        metadata: ModelMetadata = converter.convert(spec, stage.path, step)
        step("writing config")
        config = build_text_model_config(spec.triton_name, metadata.embedding_dim, spec.triton)
        (stage.path / CONFIG_FILE).write_text(render(config), encoding="utf-8")
        if spec.triton.form == "python":
            shutil.copyfile(PYTHON_MODEL_TEMPLATE, stage.path / "1" / "model.py")
        metadata.conversion_seconds = round(step.elapsed(), 2)
        (stage.path / METADATA_FILE).write_text(metadata.model_dump_json(indent=2) + "\n", encoding="utf-8")
        step(f"publishing to {stage.target}")
        stage.publish()
    return metadata


def main() -> int:
    step = Progress()
    result = _claim_stdout()
    signal.signal(signal.SIGTERM, _cancel)
    try:
        spec = _read_spec(sys.stdin.read())
        step(f"converting {spec.model_name} ({spec.kind}) into {spec.repository}/{spec.triton_name}")
        metadata = run(spec, step)
    except ConversionError as error:
        traceback.print_exc()
        return _fail(result, step, _one_line(str(error)), error.exit_code)
    except (Cancelled, KeyboardInterrupt) as error:
        return _fail(result, step, "conversion cancelled", getattr(error, "exit_code", 130))
    except Exception as error:  # noqa: BLE001 - every failure must still answer in JSON
        traceback.print_exc()
        message = f"conversion failed: {type(error).__name__}: {_one_line(str(error))}"
        return _fail(result, step, message, 1)
    step("done")
    _emit(result, metadata.model_dump_json())
    return 0


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
