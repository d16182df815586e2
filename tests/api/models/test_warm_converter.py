"""Conversions forked by the warm converter: each a process of its own, with its own
answer, exit code and deadline, from one process that imported the libraries once; gone
when idle, started again when needed."""

from __future__ import annotations

import asyncio

import pytest

from embedgate.api.errors import DeadlineExceeded, ModelNotFound
from embedgate.api.models import conversion
from embedgate.contract.spec import ConversionSpec
from tests import tiny_models


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_models.dense_model(tmp_path_factory.mktemp("warm") / "model", seed=4)


@pytest.fixture
def fresh_warm(monkeypatch):
    monkeypatch.setattr(conversion, "_warm", {})
    yield conversion._warm
    for warm in conversion._warm.values():
        if warm._control is not None:
            warm._control.close()  # the warm converter ends when its gateway lets go


def spec(model, tmp_path, name: str) -> ConversionSpec:
    return ConversionSpec(
        model_name=f"org/{name}", model_path=str(model), triton_name=f"org--{name}", repository=str(tmp_path / "repo")
    )


# Longer than the gaps between this test's conversions, short enough to see it end idle.
IDLE_S = 5.0


async def test_conversions_forked_from_one_warm_converter_each_end_on_their_own_then_it_ends_idle(
    model, tmp_path, fresh_warm
):
    """One test, so that the libraries are imported twice, not three times (seconds each)."""
    lines: list[str] = []
    first = await conversion.run_conversion(spec(model, tmp_path, "a"), timeout_s=300, warm_s=IDLE_S, on_line=lines.append)
    warm = fresh_warm[False]
    pid = warm._proc.pid
    second = await conversion.run_conversion(spec(model, tmp_path, "b"), timeout_s=300, warm_s=IDLE_S)
    assert warm._proc.pid == pid and warm._proc.returncode is None
    assert first.triton_name == "org--a" and second.triton_name == "org--b"
    assert first.parity.min_cosine >= 0.9999 and (tmp_path / "repo" / "org--b" / "config.pbtxt").is_file()
    assert any("parity check" in line for line in lines), lines
    # A failure and a deadline end only their own conversion.
    missing = ConversionSpec(model_name="org/x", model_path=str(tmp_path / "none"), triton_name="org--x",
                             repository=str(tmp_path / "repo"))
    with pytest.raises(ModelNotFound) as failed:
        await conversion.run_conversion(missing, timeout_s=300, warm_s=IDLE_S)
    assert failed.value.code == "model_not_found" and "is not a directory" in failed.value.message
    with pytest.raises(DeadlineExceeded):
        await conversion.run_conversion(spec(model, tmp_path, "slow"), timeout_s=0.01, warm_s=IDLE_S)
    assert not (tmp_path / "repo" / "org--slow").exists()
    warm = fresh_warm[False]
    assert warm._proc.pid == pid and warm._proc.returncode is None and not warm._running
    done = await conversion.run_conversion(spec(model, tmp_path, "after"), timeout_s=300, warm_s=IDLE_S)
    assert done.triton_name == "org--after" and warm._proc.pid == pid

    # Idle for IDLE_S, it ends; the next conversion starts another.
    ended = warm._proc
    assert await asyncio.wait_for(ended.wait(), 30 + IDLE_S) == 0
    again = await conversion.run_conversion(spec(model, tmp_path, "two"), timeout_s=300, warm_s=IDLE_S)
    assert again.triton_name == "org--two"
    assert warm._proc is not ended and warm._proc.returncode is None
