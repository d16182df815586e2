"""Where a request's CPU goes, stage by stage (``benchmark.py --profile``).

Each Python process of the server (the gateway or its workers, and Triton's Python-backend
stubs, whose embedded Python runs ``python_backend/model.py``) is sampled with py-spy for the
measured window, without pausing it (``--nonblocking``): every sample is a stack, bucketed
by the code it was taken in (the innermost frame that a rule of :data:`STAGES` knows). A
process's share of samples per stage times its CPU seconds from /proc gives its CPU per
stage; tritonserver itself (C++, not sampled) is one stage of its own. Divided by the
measured requests: milliseconds of CPU per request, per stage, that add up to the server's.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from embedgate.bench import processes

# Stage -> the code it is (substrings of a frame's file path), checked from the innermost
# frame of a sample outward; the first frame any rule knows decides. Order matters only
# within one frame (a path is matched against the rules in this order).
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("tokenizing", ("contract/preprocess/", "tokenizers/")),
    ("answer", ("api/http/responses.py", "orjson", "api/endpoints/vectors.py", "starlette/responses.py")),
    ("triton call", ("api/triton/", "grpc/", "grpclib/", "h2/", "hpack/", "google/protobuf/", "tritonclient/",
                     "api/compute/backend/")),
    ("thread handoff", ("api/compute/scheduling/threads.py",)),
    ("stub: model", ("onnxruntime/", "torch_graphs.py")),
    # Taking batches from Triton and sending the answers back (the stub's own Python around them).
    ("stub: exchange", ("PartThreads._work", "TritonPythonModel.execute", "triton_python_backend_utils",
                        "c_python_backend")),
    ("stub: batch layout", ("batch_layout.py", "/1/model.py", "python_backend/model.py")),
    ("batching and plan", ("api/compute/",)),
    ("endpoint", ("api/endpoints/envelope.py", "api/endpoints/embed.py", "api/endpoints/rerank.py",
                  "api/endpoints/predict.py", "api/endpoints/tei.py", "api/endpoints/similarity.py")),
    ("validation", ("pydantic/", "pydantic_core/", "fastapi/", "api/endpoints/schemas/", "api/http/paths/",
                    "api/http/routing.py")),
    ("middleware and metrics", ("api/http/middleware.py", "api/http/auth.py", "api/telemetry/",
                                "prometheus_client/", "api/http/errors.py")),
    ("http server", ("uvicorn/", "httptools/", "h11/", "starlette/")),
    ("event loop", ("asyncio/", "uvloop/", "selectors.py", "concurrent/futures/", "threading.py")),
)
OTHER = "other"
# tritonserver itself: C++, its CPU from /proc.
TRITONSERVER = "tritonserver"


def stage_of(frames: list[str]) -> str:
    """The stage of one sample, its frames innermost first (``function (path:line)``)."""
    for frame in frames:
        for stage, markers in STAGES:
            if any(marker in frame for marker in markers):
                return stage
    return OTHER


def parse_raw(text: str) -> Counter[str]:
    """py-spy's raw (collapsed) output, ``outer;...;inner count`` per line, as samples per stage."""
    stages: Counter[str] = Counter()
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        stages[stage_of(list(reversed(stack.split(";"))))] += int(count)
    return stages


def py_spy() -> str | None:
    """py-spy's executable: beside this Python (a venv's bin), or on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


@dataclass
class StageProfile:
    """py-spy recordings of the server's Python processes over the measured window."""

    roots: list[int]
    rate: int = 200
    _recorders: dict[int, tuple[subprocess.Popen, Path]] = field(default_factory=dict)
    _scratch: tempfile.TemporaryDirectory | None = None

    def start(self) -> None:
        executable = py_spy()
        if executable is None:
            raise SystemExit("--profile needs py-spy (pip install py-spy)")
        self._scratch = tempfile.TemporaryDirectory(prefix="embedgate-profile-")
        for pid in processes.process_tree(self.roots):
            if not _is_python(pid):
                continue
            output = Path(self._scratch.name) / f"{pid}.txt"
            command = [executable, "record", "--pid", str(pid), "--rate", str(self.rate), "--format", "raw",
                       "--nonblocking", "--output", str(output)]
            recorder = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self._recorders[pid] = (recorder, output)

    def stop(self) -> dict[int, Counter[str]]:
        """Samples per stage, per sampled process."""
        found: dict[int, Counter[str]] = {}
        for pid, (recorder, output) in self._recorders.items():
            recorder.send_signal(signal.SIGINT)
            try:
                recorder.wait(timeout=60)
            except subprocess.TimeoutExpired:
                recorder.kill()
            if output.exists():
                found[pid] = parse_raw(output.read_text())
        if self._scratch is not None:
            self._scratch.cleanup()
        return found


def _is_python(pid: int) -> bool:
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False
    return "libpython" in maps or "python3" in os.readlink(f"/proc/{pid}/exe")


def cpu_per_stage(
    samples: dict[int, Counter[str]], before: list[processes.ProcessSample], after: list[processes.ProcessSample],
    requests: int,
) -> dict[str, float]:
    """Milliseconds of CPU per request, per stage: each sampled process's CPU seconds split
    by its samples' stages, tritonserver's own, and what a process with no samples used."""
    spent = {sample.pid: sample.cpu_s for sample in after}
    for sample in before:
        if sample.pid in spent:
            spent[sample.pid] -= sample.cpu_s
    names = {sample.pid: sample.name for sample in after}
    stages: Counter[str] = Counter()
    for pid, seconds in spent.items():
        counts = samples.get(pid)
        if counts and sum(counts.values()):
            total = sum(counts.values())
            for stage, count in counts.items():
                stages[stage] += seconds * count / total
        else:
            stages[TRITONSERVER if names.get(pid, "").startswith("tritonserver") else OTHER] += seconds
    return {stage: round(seconds * 1000 / max(1, requests), 4) for stage, seconds in stages.most_common()}
