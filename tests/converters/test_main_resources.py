"""Running out of memory or disk: a clear exit code and message, nothing published."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from embedgate.contract.spec import ConversionSpec
from embedgate.converters.__main__ import _out_of_memory
from tests.helpers import python_path

REPO_ROOT = Path(__file__).resolve().parents[2]

FAILING_CONVERTER = textwrap.dedent(
    """
    import errno

    def convert(spec, out_dir, step):
        (out_dir / "1").mkdir()
        (out_dir / "1" / "model.onnx").write_bytes(b"half a model")
        if spec.model_name == "disk-full":
            raise OSError(errno.ENOSPC, "No space left on device")
        raise RuntimeError("unable to mmap 90868376 bytes from file <model.safetensors>: Cannot allocate memory (12)")
    """
)
RUNNER = textwrap.dedent(
    """
    import sys
    import embedgate.converters.__main__ as entry
    from tests.converters.fake_kinds import install
    install(sentence_transformers="failing_converter")
    sys.exit(entry.main())
    """
)


@pytest.mark.parametrize(
    "model_name, exit_code, message",
    [("disk-full", 6, "no space left"), ("no-memory", 5, "out of memory")],
)
def test_resource_failures_have_their_own_exit_codes(tmp_path, model_name, exit_code, message):
    (tmp_path / "failing_converter.py").write_text(FAILING_CONVERTER)
    (tmp_path / "runner.py").write_text(RUNNER)
    repository = tmp_path / "repo"
    repository.mkdir()
    spec = ConversionSpec(model_name=model_name, triton_name=model_name, repository=str(repository))
    env = dict(os.environ, PYTHONPATH=python_path(REPO_ROOT, tmp_path))
    done = subprocess.run(
        [sys.executable, str(tmp_path / "runner.py")],
        input=spec.model_dump_json(), capture_output=True, text=True, env=env, timeout=60,
    )
    assert done.returncode == exit_code, done.stderr
    assert message in json.loads(done.stdout.strip().splitlines()[-1])["error"]
    assert list(repository.iterdir()) == [], "a failed conversion left files behind"


@pytest.mark.parametrize(
    "error, expected",
    [
        (MemoryError(), True),
        (OSError(errno.ENOMEM, "Cannot allocate memory"), True),
        (ImportError("libtorch_cpu.so: failed to map segment from shared object"), True),
        (RuntimeError("std::bad_alloc"), True),
        (RuntimeError("shape mismatch"), False),
        (OSError(errno.ENOSPC, "No space left on device"), False),
    ],
)
def test_out_of_memory_is_recognised_in_its_disguises(error, expected):
    assert _out_of_memory(error) is expected
