"""The build step pyproject.toml cannot say: TEI's gRPC stubs generated from
``api/grpc/proto/tei.proto`` with grpcio-tools (a build requirement) into
``api/grpc/stubs/`` before the package is built, in a wheel's build and an editable
install's alike. The generated modules are not in the repository."""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
PROTO_DIR = ROOT / "api" / "grpc" / "proto"
STUBS_DIR = ROOT / "api" / "grpc" / "stubs"


def generate_stubs() -> None:
    from grpc_tools import protoc

    args = [
        "grpc_tools.protoc", f"-I{PROTO_DIR}", f"--python_out={STUBS_DIR}", f"--pyi_out={STUBS_DIR}",
        f"--grpc_python_out={STUBS_DIR}", str(PROTO_DIR / "tei.proto"),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {PROTO_DIR / 'tei.proto'}")
    # The service module imports its messages as a top-level module; here they are a sibling.
    services = STUBS_DIR / "tei_pb2_grpc.py"
    text = services.read_text()
    services.write_text(text.replace("\nimport tei_pb2 as tei__pb2\n", "\nfrom . import tei_pb2 as tei__pb2\n", 1))


class BuildWithStubs(build_py):
    def run(self) -> None:
        generate_stubs()
        super().run()


setup(cmdclass={"build_py": BuildWithStubs})
