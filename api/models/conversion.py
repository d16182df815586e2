"""Runs a conversion in a process of its own (``python -m embedgate.converters``, or forked by
the warm converter: ``warm_converter.py``) so torch never enters the gateway and a crash, a
hang or an out-of-memory kill costs only that process."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import time
from collections.abc import Callable

from embedgate.contract.repository import ModelRepository, RepositoryError
from embedgate.contract.spec import ConversionSpec, ModelMetadata

from ..children import tied_to_parent
from ..errors import (
    ConversionCrashed,
    ConversionFailed,
    ConversionOutOfMemory,
    ConversionTargetExists,
    DeadlineExceeded,
    EmbedgateError,
    HubAccessDenied,
    HubDownloadDisabled,
    HubTimeout,
    HubUnavailable,
    InsufficientStorage,
    ModelNotFound,
    RepositoryUnavailable,
    TrustRemoteCodeRequired,
    UnsupportedModel,
)
from ..settings import Settings
from ..telemetry.metrics import observe_conversion
from .progress import Progress
from .warm_converter import ConverterProcess, WarmConverter

log = logging.getLogger("embedgate.conversion")


# The converter's exit codes (converters/__main__.py) and what a client sees for each.
FAILURES: dict[int, type[EmbedgateError]] = {
    1: ConversionFailed,
    2: ModelNotFound,
    3: ConversionFailed,
    4: ConversionTargetExists,
    5: ConversionOutOfMemory,
    6: InsufficientStorage,
    7: RepositoryUnavailable,
    8: UnsupportedModel,
    9: TrustRemoteCodeRequired,
    10: HubDownloadDisabled,
    11: HubAccessDenied,
    12: HubTimeout,
    13: HubUnavailable,
}


# This process's warm converter, by whether it may reach the hub (a setting of the server).
_warm: dict[bool, WarmConverter] = {}


class _Cold:
    """A conversion started as its own Python (``python -m embedgate.converters``)."""

    def __init__(self, proc: asyncio.subprocess.Process):
        self.proc = proc
        self.pid = proc.pid
        self.stdout, self.stderr = proc.stdout, proc.stderr

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    async def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        await self.proc.stdin.drain()
        self.proc.stdin.close()

    async def wait(self) -> int:
        return await self.proc.wait()

    def kill(self) -> None:
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass


async def _start(spec: ConversionSpec, memory_limit_mb: int, warm_s: float) -> _Cold | ConverterProcess:
    # A memory cap covers the whole conversion, its imports included: only a cold start
    # keeps that meaning (a forked process already holds the libraries' address space).
    if warm_s > 0 and not memory_limit_mb:
        warm = _warm.setdefault(spec.allow_network, WarmConverter(warm_s, spec.allow_network))
        try:
            return await warm.spawn(spec.library)
        except (OSError, asyncio.TimeoutError) as error:
            log.warning("the warm converter failed (%s); converting in a process of its own", error)
    proc = await asyncio.create_subprocess_exec(
        *tied_to_parent([sys.executable, "-m", "embedgate.converters"], memory_limit_mb=memory_limit_mb),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    return _Cold(proc)


@observe_conversion
async def run_conversion(
    spec: ConversionSpec,
    *,
    timeout_s: float,
    memory_limit_mb: int = 0,
    on_line: Callable[[str], None] | None = None,
    warm_s: float = 0.0,
) -> ModelMetadata:
    """``spec`` converted and published; ``warm_s``: seconds the warm converter waits for
    the next conversion (0: a process of its own, importing everything itself)."""
    started = time.monotonic()
    log.info("converting %s -> %s", spec.model_name, spec.triton_name)
    proc = await _start(spec, memory_limit_mb, warm_s)

    async def progress() -> None:
        assert proc.stderr is not None
        async for raw in proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            if line:
                log.info("[%s] %s", spec.model_name, line)
                if on_line is not None:
                    on_line(line)

    async def exchange() -> bytes:
        # Not communicate(): stderr is already being read by progress().
        assert proc.stdout is not None
        await proc.send(spec.model_dump_json().encode())
        output = await proc.stdout.read()
        await proc.wait()
        return output

    progress_task = asyncio.create_task(progress())
    try:
        stdout = await asyncio.wait_for(exchange(), timeout_s)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise DeadlineExceeded(
            f"conversion of '{spec.model_name}' did not finish in {timeout_s:.0f}s"
        ) from None
    except asyncio.CancelledError:
        proc.kill()
        await proc.wait()
        raise
    finally:
        await asyncio.gather(progress_task, return_exceptions=True)

    last = stdout.decode(errors="replace").strip().splitlines()[-1:] or [""]
    try:
        payload = json.loads(last[0])
    except ValueError:
        payload = {}
    if proc.returncode == 0:
        metadata = ModelMetadata.model_validate(payload)
        log.info("converted %s in %.1fs", spec.model_name, time.monotonic() - started)
        return metadata

    message = payload.get("error") if isinstance(payload, dict) else None
    failure = FAILURES.get(proc.returncode or 0)
    if failure is not None:
        raise failure(message or f"conversion of '{spec.model_name}' failed")
    # Killed by a signal (negative code; SIGKILL is what the kernel's OOM killer sends).
    hint = " (killed: out of memory?)" if proc.returncode == -signal.SIGKILL else ""
    raise ConversionCrashed(
        f"conversion of '{spec.model_name}' crashed (exit {proc.returncode}){hint}; "
        "nothing was published"
    )


async def convert(
    spec: ConversionSpec, settings: Settings, repository: ModelRepository, parts: tuple[str, ...], progress: Progress
) -> ModelMetadata:
    """``spec`` converted within this server's limits; on failure, what the converter left
    of ``parts`` removed (a killed converter cannot clean up after itself)."""
    try:
        return await run_conversion(
            spec,
            timeout_s=settings.conversion_timeout_s,
            memory_limit_mb=settings.conversion_memory_limit_mb,
            on_line=progress.converter_line,
            warm_s=settings.converter_warm_s,
        )
    except ConversionTargetExists:
        raise  # another conversion's model, or its upload in progress: not ours to remove
    except BaseException:
        for part in parts:
            await asyncio.to_thread(_remove_partial, repository, part)
        raise


def _remove_partial(repository: ModelRepository, part: str) -> None:
    try:
        repository.remove_partial(part)
    except RepositoryError as error:
        log.warning("could not remove what the conversion of %s left: %s", part, error)
