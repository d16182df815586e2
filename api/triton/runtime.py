"""``embedgate triton-runtime``: an environment of the embedded Triton's own.

The tritonserver embedgate runs ships in the ``nvidia-pytriton`` wheel, whose Python backend
stub is built for numpy 1 and whose metadata asks for ``numpy<2`` and a protobuf below 7.
Installed beside the gateway (the ``triton`` extra) it holds the whole environment to
those. This makes a place for it apart instead, once, at install time: a virtual
environment of this Python with nvidia-pytriton and numpy 1 in it, and this environment's
packages after them (onnxruntime, tokenizers, torch for GPU instances), so the models
that Triton runs see numpy 1 and the gateway keeps whatever numpy and protobuf it has.
``bundle.prepare`` finds it at serve time, with no package index.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path

from .bundle import default_runtime, runtime_python

# What the runtime holds: the tritonserver embedgate was tested with, and the numpy its
# stub is built for.
REQUIREMENTS = ("nvidia-pytriton==0.7.0", "numpy>=1.24,<2")
_PTH = "embedgate-gateway.pth"


class RuntimeFailed(RuntimeError):
    pass


def _run(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeFailed(f"{' '.join(argv[:4])} ... failed:\n{(done.stdout + done.stderr).strip()[-3000:]}")
    return done.stdout


def gateway_site_dirs() -> list[str]:
    """This environment's package directories, in the order its Python searches them
    (those a .pth file added included: a .pth line is not read again from there)."""
    return [entry for entry in sys.path if Path(entry).name in ("site-packages", "dist-packages")]


def create(target: Path | None = None, *, find_links: Sequence[str] = (), no_index: bool = False) -> Path:
    """Make (or make again) the runtime at ``target`` (default ``bundle.default_runtime()``);
    returns its Python. Built beside ``target`` and renamed into place: a runtime is whole."""
    target = Path(target or default_runtime()).absolute()
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.parent.mkdir(parents=True, exist_ok=True)
    try:
        _run([sys.executable, "-m", "venv", "--without-pip", str(staging)])
        python = runtime_python(staging)
        site = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).strip()
        sources = [f"--find-links={where}" for where in find_links] + (["--no-index"] if no_index else [])
        _run([
            sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--quiet",
            "--disable-pip-version-check", *sources, *REQUIREMENTS,
        ])
        Path(site, _PTH).write_text("".join(f"{entry}\n" for entry in gateway_site_dirs()))
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return runtime_python(target)


def describe(python: Path) -> str:
    """One line on what the runtime at ``python`` holds (its numpy, its tritonserver)."""
    probe = "import numpy, importlib.metadata as m; print(m.version('nvidia-pytriton'), numpy.__version__)"
    pytriton, numpy = _run([str(python), "-c", probe]).split()
    return f"nvidia-pytriton {pytriton}, numpy {numpy}, Python {sysconfig.get_python_version()}"
