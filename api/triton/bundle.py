"""Prepare the tritonserver bundled in the ``nvidia-pytriton`` wheel to run as a plain binary.

The wheel ships ``pytriton/tritonserver/{bin,backends,caches,python_backend_stubs}``.
The Python backend looks for ``triton_python_backend_stub`` beside
``libtriton_python.so``, so the tree is copied once into a work directory with the stub
for the running interpreter put in place. The copy loses nothing but the wheel's RPATH,
which ``LD_LIBRARY_PATH`` restores.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import uuid
from dataclasses import dataclass
from pathlib import Path

_READY_MARK = ".prepared"


class BundleError(RuntimeError):
    pass


@dataclass(frozen=True)
class PreparedTriton:
    binary: Path
    backend_dir: Path
    cache_dir: Path
    env: dict[str, str]
    version: str


def _package_dir() -> Path:
    spec = importlib.util.find_spec("pytriton")
    if spec is None or spec.origin is None:
        raise BundleError("nvidia-pytriton is not installed: pip install nvidia-pytriton==0.7.0")
    return Path(spec.origin).parent


def _runtime_env(package_dir: Path, stub_python: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    lib_dirs = [str(package_dir.parent / "nvidia_pytriton.libs")]
    libdir = sysconfig.get_config_var("LIBDIR")
    if libdir:
        lib_dirs.append(libdir)
    if env.get("LD_LIBRARY_PATH"):
        lib_dirs.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(lib_dirs)
    # The stub's embedded interpreter finds sys.prefix through `python3` on PATH (not
    # PYTHONPATH): put this interpreter's bin (or stub_python's) first so model.py sees
    # that environment's packages.
    python = Path(stub_python) if stub_python else Path(sys.executable)
    env["PATH"] = os.pathsep.join([str(python.parent), env.get("PATH", "")])
    return env


def _numpy_version(stub_python: Path | None) -> str:
    if stub_python is None:
        return importlib.metadata.version("numpy")
    try:
        found = subprocess.run(
            [str(stub_python), "-c", "import sys, numpy; print(numpy.__version__, '%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise BundleError(f"triton_stub_python {stub_python} cannot be run: {error}") from None
    if found.returncode != 0:
        raise BundleError(f"triton_stub_python {stub_python} has no numpy: {found.stderr.strip()[-300:]}")
    version, python_version = found.stdout.split()
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if python_version != here:
        raise BundleError(f"triton_stub_python {stub_python} is Python {python_version}; the gateway's is {here}")
    return version


def check_numpy(version: str) -> None:
    """The Python backend stub of nvidia-pytriton 0.7.0 is built for numpy 1: under numpy 2
    it loads models, but every output tensor comes back empty (seen with Python 3.12)."""
    if int(version.split(".")[0]) >= 2:
        raise BundleError(
            f"numpy {version} is installed; the Python backend of nvidia-pytriton 0.7.0 needs numpy<2 "
            "(under numpy 2 every output comes back empty): pip install 'numpy<2'"
        )


def prepare(work_dir: Path, stub_python: Path | None = None) -> PreparedTriton:
    """Copy the bundle into ``work_dir`` (once per pytriton and Python version). Models run
    in the environment of ``stub_python`` (default: this interpreter's), of this Python
    version, with numpy 1."""
    check_numpy(_numpy_version(stub_python))
    package_dir = _package_dir()
    source = package_dir / "tritonserver"
    version = importlib.metadata.version("nvidia-pytriton")
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = source / "python_backend_stubs" / py / "triton_python_backend_stub"
    if not stub.exists():
        raise BundleError(f"nvidia-pytriton {version} has no Python backend stub for Python {py}")

    target = work_dir / f"tritonserver-{version}-py{py}"
    if not (target / _READY_MARK).exists():
        work_dir.mkdir(parents=True, exist_ok=True)
        staging = work_dir / f".staging-{uuid.uuid4().hex[:8]}"
        try:
            shutil.copytree(source, staging, ignore=shutil.ignore_patterns("python_backend_stubs"))
            shutil.copy2(stub, staging / "backends" / "python" / stub.name)
            (staging / _READY_MARK).write_text(version)
            try:
                os.rename(staging, target)
            except OSError:
                # Another process prepared it first (or a stale incomplete copy is there).
                if not (target / _READY_MARK).exists():
                    shutil.rmtree(target, ignore_errors=True)
                    os.rename(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    return PreparedTriton(
        binary=target / "bin" / "tritonserver",
        backend_dir=target / "backends",
        cache_dir=target / "caches",
        env=_runtime_env(package_dir, stub_python),
        version=version,
    )
