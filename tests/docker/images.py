"""Container images built and run on this machine without Docker or an image registry.

Debian's ``buildah`` builds a Dockerfile (``--isolation chroot``) and runs a command in
the image it built; ``debootstrap`` makes the Debian base a ``FROM`` names, from Debian's
packages. ``buildah run`` starts no process namespace and keeps the host's network, so
the image's entrypoint runs as a process tree of this machine, listening on 127.0.0.1,
in a mount namespace of its own: that namespace tells which processes are the
container's, and ``stop`` sends the signal ``docker stop`` sends to the entrypoint.

Building reaches the package registries (Debian's, PyPI) as a user's build does; what
PyPI would send, uv takes from the cache this machine's install filled (its directory
mounted into the build), so a build downloads no wheel it already has.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# What a base image must hold for docker/Dockerfile: Python >= 3.11 with venv and its
# shared library (the Triton Python backend's stub links it), CA certificates, useradd.
BASE_PACKAGES = ("python3", "python3-venv", "libpython3.11", "ca-certificates", "passwd")
TOOLS = ("buildah", "debootstrap")


def require_tools() -> None:
    """buildah and debootstrap (``apt-get install buildah debootstrap``) and root, which
    both need. Without them the image tests are skipped, unless EMBEDGATE_IMAGE_TESTS is
    ``required`` (``.ci/run`` sets it, and installs them): then they fail."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    why = (f"{', '.join(missing)} not installed (apt-get install {' '.join(TOOLS)})" if missing
           else None if os.geteuid() == 0 else "buildah and debootstrap need root")
    if why is None:
        return
    if os.environ.get("EMBEDGATE_IMAGE_TESTS") == "required":
        pytest.fail(f"the image tests cannot run: {why}")
    pytest.skip(f"the image tests need buildah and debootstrap: {why}")


def run(*argv: str | Path, timeout: float = 900, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, argv[:3]))} ... exited {done.returncode}:\n"
                             f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return done


def uv_cache_dir() -> Path:
    """The cache of the uv that installed this environment (the Makefile's)."""
    uv = Path(sys.executable).parent / "uv"
    return Path(run(uv if uv.exists() else "uv", "cache", "dir").stdout.strip())


def ca_bundle() -> str | None:
    """The CA bundle this machine's pip trusts, for pip and uv inside a build."""
    for name in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
        if os.environ.get(name) and Path(os.environ[name]).is_file():
            return os.environ[name]
    return None


@dataclass
class Images:
    """The images one test run builds, named for it, and removed with every container made
    from them by ``remove()``."""

    prefix: str
    work: Path
    names: list[str] = field(default_factory=list)

    def debian_base(self, suite: str = "bookworm") -> str:
        """A Debian image made by debootstrap: the base a build's ``BASE`` argument names."""
        rootfs = self.work / "rootfs"
        run("debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", suite, rootfs)
        archive = self.work / "rootfs.tar"
        with tarfile.open(archive, "w") as tar:
            tar.add(rootfs, arcname=".")
        shutil.rmtree(rootfs)
        name = self._named("debian")
        container = run("buildah", "from", "scratch").stdout.strip()
        try:
            run("buildah", "add", container, archive, "/")
            run("buildah", "commit", "--quiet", container, name)
        finally:
            run("buildah", "rm", container, check=False)
            archive.unlink()
        return name

    def build(self, dockerfile: str, what: str, **build_args: str) -> str:
        """``buildah bud`` of ``dockerfile`` with the repository as its context, as a user's
        ``docker build -f <dockerfile> .`` (the Docker format keeps HEALTHCHECK)."""
        name = self._named(what)
        cache = uv_cache_dir()
        argv = ["buildah", "bud", "--isolation", "chroot", "--format", "docker", "--layers=false",
                "-f", ROOT / dockerfile, "-t", name,
                "--build-arg", "UV_CACHE_DIR=/uv-cache", "--volume", f"{cache}:/uv-cache"]
        if (bundle := ca_bundle()) is not None:
            argv += ["--secret", f"id=pip-cert,src={bundle}"]
        for key, value in build_args.items():
            argv += ["--build-arg", f"{key}={value}"]
        log = self.work / f"build-{what}.log"
        with open(log, "w") as out:
            done = subprocess.run([*map(str, argv), str(ROOT)], stdout=out, stderr=subprocess.STDOUT, timeout=1200)
        assert done.returncode == 0, f"building {dockerfile} failed:\n{log.read_text()[-6000:]}"
        return name

    def inspect(self, name: str) -> dict:
        return json.loads(run("buildah", "inspect", "--type", "image", name).stdout)

    def config(self, name: str) -> dict:
        """The image's Docker config: User, Env, Entrypoint, Cmd, ExposedPorts, Volumes, Healthcheck..."""
        return self.inspect(name)["Docker"]["config"]

    def layers(self, name: str) -> list[dict]:
        return json.loads(self.inspect(name)["Manifest"])["layers"]

    def size(self, name: str) -> int:
        """Bytes of the image's layers, unpacked (what a host's disk holds for it)."""
        return sum(layer["size"] for layer in self.layers(name))

    def remove(self) -> None:
        for name in reversed(self.names):
            for container in run("buildah", "containers", "--quiet", "--filter", f"ancestor={name}",
                                 check=False).stdout.split():
                run("buildah", "rm", container, check=False)
            run("buildah", "rmi", "--force", name, check=False)

    def _named(self, what: str) -> str:
        name = f"localhost/{self.prefix}-{what}:test"
        self.names.append(name)
        return name


def mount_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def command_line(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


class Container:
    """A container of ``image`` running ``command`` (the image's entrypoint and command, as
    ``docker run`` starts them) through ``buildah run``, with ``env`` and ``volumes``."""

    def __init__(self, image: str, command: list[str], log: Path, env: dict[str, str] | None = None,
                 volumes: dict[Path, str] | None = None):
        self.image, self.command, self.log_path = image, command, log
        self.env, self.volumes = env or {}, volumes or {}
        self.name = run("buildah", "from", image).stdout.strip()
        # A path the image declares a VOLUME gets a volume of buildah's own, over any bind
        # mount there: drop the declaration from this container, so the bind takes its
        # place, as ``docker run -v`` puts it.
        for inside in self.volumes.values():
            run("buildah", "config", "--volume", f"{inside}-", self.name)
        self._log = open(log, "wb")
        self.process = subprocess.Popen(self._run_argv(command), stdout=self._log, stderr=subprocess.STDOUT)
        self.entrypoint_pid, self.namespace = self._find_entrypoint()

    def _run_argv(self, command: list[str]) -> list[str]:
        argv = ["buildah", "run", "--isolation", "chroot"]
        for key, value in self.env.items():
            argv += ["-e", f"{key}={value}"]
        for host, inside in self.volumes.items():
            argv += ["-v", f"{host}:{inside}"]
        return [*argv, self.name, "--", *command]

    def _find_entrypoint(self, timeout: float = 30) -> tuple[int, str]:
        """The process that runs ``command`` in the container (PID 1 under Docker) and its
        mount namespace, the container's."""
        ours = mount_namespace(os.getpid())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"the container exited at once:\n{self.log()}"
            for pid in self.pids_under(self.process.pid):
                argv = command_line(pid)
                namespace = mount_namespace(pid)
                if (argv[1:] == self.command[1:] and argv and Path(argv[0]).name == Path(self.command[0]).name
                        and namespace not in (None, ours)):
                    return pid, namespace
            time.sleep(0.05)
        raise AssertionError(f"no process ran {self.command} in {timeout}s:\n{self.log()}")

    @staticmethod
    def pids_under(root: int) -> list[int]:
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(ppid, []).append(int(entry.name))
        found, todo = [], [root]
        while todo:
            found.extend(kids := children.get(todo.pop(), []))
            todo.extend(kids)
        return found

    def processes(self) -> list[tuple[int, list[str]]]:
        """Every process of the container, wherever it was re-parented to."""
        return [(int(entry.name), command_line(int(entry.name))) for entry in Path("/proc").iterdir()
                if entry.name.isdigit() and mount_namespace(int(entry.name)) == self.namespace]

    def exec(self, *argv: str, timeout: float = 120, env: dict[str, str] | None = None,
             user: str | None = None) -> subprocess.CompletedProcess:
        """One more command in the container (its file system and volumes, its image's env,
        its user unless ``user`` is given)."""
        extra = [arg for key, value in (env or {}).items() for arg in ("-e", f"{key}={value}")]
        extra += [arg for host, inside in self.volumes.items() for arg in ("-v", f"{host}:{inside}")]
        extra += ["--user", user] if user else []
        return run("buildah", "run", "--isolation", "chroot", *extra, self.name, "--", *argv,
                   timeout=timeout, check=False)

    def stop(self, timeout: float = 60) -> int:
        """What ``docker stop`` does: SIGTERM to the entrypoint, then wait for it to exit;
        its exit status (that of ``buildah run``, which passes it on)."""
        if self.process.poll() is None:
            try:
                os.kill(self.entrypoint_pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the container did not stop within {timeout}s of SIGTERM:\n{self.log()}") from None

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-6000:]

    def remove(self) -> None:
        """Kill whatever is left of it (a failed test's), then remove it."""
        for pid, _ in self.processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self._log.close()
        run("buildah", "rm", self.name, check=False)
