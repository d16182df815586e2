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


def _runtime_env(package_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    lib_dirs = [str(package_dir.parent / "nvidia_pytriton.libs")]
    libdir = sysconfig.get_config_var("LIBDIR")
    if libdir:
        lib_dirs.append(libdir)
    if env.get("LD_LIBRARY_PATH"):
        lib_dirs.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(lib_dirs)
    # The stub's embedded interpreter finds sys.prefix through `python3` on PATH: put
    # this interpreter's bin first so model.py sees this environment's packages.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def prepare(work_dir: Path) -> PreparedTriton:
    """Copy the bundle into ``work_dir`` (once per pytriton and Python version)."""
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
        env=_runtime_env(package_dir),
        version=version,
    )
