"""Prepare the tritonserver bundled in the ``nvidia-pytriton`` wheel to run as a plain binary.

The wheel is found in the gateway's own environment (the ``triton`` extra, with numpy 1),
or in an environment of Triton's own where the gateway's has numpy 2 or lacks it
(``embedgate triton-runtime`` makes one: ``runtime.py``), or in EMBEDGATE_TRITON_STUB_PYTHON's.

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


@dataclass(frozen=True)
class _Found:
    """nvidia-pytriton as one Python environment has it."""

    package_dir: Path
    version: str
    numpy: str
    python: str  # "3.11"


# Found, not imported: pytriton's own imports need packages a Triton runtime leaves out.
_PROBE = (
    "import sys, importlib.util as u, importlib.metadata as m, numpy; s = u.find_spec('pytriton'); "
    "s or sys.exit('No module named pytriton'); print(s.origin); print(m.version('nvidia-pytriton')); "
    "print(numpy.__version__); print('%d.%d' % sys.version_info[:2])"
)
_HERE = f"{sys.version_info.major}.{sys.version_info.minor}"


def _found_here() -> _Found | None:
    """nvidia-pytriton in the gateway's own environment, if it is there."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or spec.origin is None:
        return None
    return _Found(
        Path(spec.origin).parent, importlib.metadata.version("nvidia-pytriton"),
        importlib.metadata.version("numpy"), _HERE,
    )


def _found_in(python: Path) -> _Found:
    """nvidia-pytriton in the environment of ``python`` (a stub Python, a Triton runtime)."""
    try:
        found = subprocess.run([str(python), "-c", _PROBE], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise BundleError(f"the stub Python {python} cannot be run: {error}") from None
    if found.returncode != 0:
        raise BundleError(
            f"the stub Python {python} needs numpy and nvidia-pytriton: {found.stderr.strip()[-300:]}"
        )
    origin, version, numpy, python_version = found.stdout.split()
    return _Found(Path(origin).parent, version, numpy, python_version)


def default_runtime() -> Path:
    """Where ``embedgate triton-runtime`` puts the embedded Triton's own environment."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "embedgate" / f"triton-runtime-py{_HERE}"


def runtime_python(runtime: Path) -> Path:
    return runtime / "bin" / "python3"


def stub_python_for(configured: Path | None) -> Path | None:
    """The Python whose environment runs Triton and its stubs: ``configured``
    (EMBEDGATE_TRITON_STUB_PYTHON) if set; else this one (None) where it has
    nvidia-pytriton and numpy 1; else the Triton runtime ``embedgate triton-runtime`` made."""
    if configured is not None:
        return Path(configured)
    here = _found_here()
    if here is not None and _numpy_major(here.numpy) < 2:
        return None
    python = runtime_python(default_runtime())
    if python.exists():
        return python
    why = (
        f"numpy {here.numpy} is installed beside nvidia-pytriton" if here is not None
        else "nvidia-pytriton (the tritonserver it bundles) is not installed"
    )
    raise BundleError(
        f"{why}, and the embedded Triton needs both with numpy<2 (its Python backend stub is built for "
        f"numpy 1): run `embedgate triton-runtime` once (it gives Triton an environment of its own in "
        f"{default_runtime()}; needs a package index or --find-links), or pip install 'embedgate[triton]' "
        "where numpy<2 suits, or set EMBEDGATE_TRITON_URL to a running Triton"
    )


def _numpy_major(version: str) -> int:
    return int(version.split(".")[0])


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


def check_numpy(version: str) -> None:
    """The Python backend stub of nvidia-pytriton 0.7.0 is built for numpy 1: under numpy 2
    it loads models, but every output tensor comes back empty (seen with Python 3.12)."""
    if _numpy_major(version) >= 2:
        raise BundleError(
            f"numpy {version} is in the stub's environment; the Python backend of nvidia-pytriton 0.7.0 needs "
            "numpy<2 (under numpy 2 every output comes back empty): `embedgate triton-runtime` gives Triton "
            "an environment of its own"
        )


def prepare(work_dir: Path, stub_python: Path | None = None) -> PreparedTriton:
    """Copy the bundle into ``work_dir`` (once per pytriton and Python version). Models run
    in the environment of the stub Python (``stub_python_for``), of this Python version,
    with numpy 1."""
    python = stub_python_for(stub_python)
    found = _found_here() if python is None else _found_in(python)
    assert found is not None
    if found.python != _HERE:
        raise BundleError(f"the stub Python {python} is Python {found.python}; the gateway's is {_HERE}")
    check_numpy(found.numpy)
    package_dir, version, py = found.package_dir, found.version, _HERE
    source = package_dir / "tritonserver"
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
        env=_runtime_env(package_dir, python),
        version=version,
    )
