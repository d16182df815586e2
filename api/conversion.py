"""Runs a conversion in a subprocess (``python -m converters``) so torch never enters the
gateway and a crash, a hang or an out-of-memory kill costs only that subprocess."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time

from converters.spec import ConversionSpec, ModelMetadata

from .errors import ApiError, ConversionFailed, DeadlineExceeded, ModelNotFound

log = logging.getLogger("embedgate.conversion")

EXIT_NOT_FOUND = 2
EXIT_PARITY = 3
EXIT_EXISTS = 4


class ConversionCrashed(ApiError):
    status, code = 500, "conversion_crashed"


class ConversionTargetExists(ApiError):
    status, code = 409, "model_conflict"


async def run_conversion(spec: ConversionSpec, *, timeout_s: float) -> ModelMetadata:
    started = time.monotonic()
    log.info("converting %s -> %s", spec.model_name, spec.triton_name)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "converters",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )

    async def progress() -> None:
        assert proc.stderr is not None
        async for raw in proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            if line:
                log.info("[%s] %s", spec.model_name, line)

    async def exchange() -> bytes:
        # Not communicate(): stderr is already being read by progress().
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(spec.model_dump_json().encode())
        await proc.stdin.drain()
        proc.stdin.close()
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
    if proc.returncode == EXIT_NOT_FOUND:
        raise ModelNotFound(message or f"model '{spec.model_name}' could not be found")
    if proc.returncode == EXIT_EXISTS:
        raise ConversionTargetExists(message or f"model '{spec.model_name}' is already in the repository")
    if proc.returncode == EXIT_PARITY or (message and proc.returncode and proc.returncode > 0):
        raise ConversionFailed(message or f"conversion of '{spec.model_name}' failed")
    # Killed by a signal (negative code: e.g. the kernel's OOM killer) or no message.
    raise ConversionCrashed(
        f"conversion of '{spec.model_name}' crashed (exit {proc.returncode}); "
        "nothing was published"
    )
