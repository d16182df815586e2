"""Progress of long work: steps with elapsed seconds in the server log, and only the
converter's step lines (never its other output) handed to listeners."""

import logging
from types import SimpleNamespace

from embedgate.api.models import progress as progress_module
from embedgate.api.models.progress import Progress


def test_steps_are_logged_with_elapsed_seconds_and_told_to_listeners(caplog, monkeypatch):
    # A clock the test moves: the seconds are the ones that passed, however busy the machine.
    now = [100.0]
    monkeypatch.setattr(progress_module, "time", SimpleNamespace(monotonic=lambda: now[0]))
    heard = []
    progress = Progress("org/model")
    progress.listen(heard.append)
    with caplog.at_level(logging.INFO, logger="embedgate.progress"):
        progress.step("converting")
        now[0] += 12.5
        progress.step("loading into Triton")
    assert "[org/model] [   0.0s] converting" in caplog.text
    assert "[org/model] [  12.5s] loading into Triton" in caplog.text
    assert heard == [
        {"event": "progress", "elapsed_s": 0.0, "message": "converting"},
        {"event": "progress", "elapsed_s": 12.5, "message": "loading into Triton"},
    ]


def test_only_the_converters_step_lines_reach_listeners():
    heard = []
    progress = Progress("org/model")
    progress.listen(heard.append)
    for line in (
        "[  3.2s] exporting ONNX (opset 17)",
        "[123.0s] parity check: min cosine 0.999999",
        "Traceback (most recent call last):",
        "Some weights of BertModel were not initialized",
        "[  1.0s]",
    ):
        progress.converter_line(line)
    assert [e["message"] for e in heard] == ["exporting ONNX (opset 17)", "parity check: min cosine 0.999999"]


def test_a_steps_numbers_reach_listeners_beside_its_words():
    heard = []
    progress = Progress("org/model")
    progress.listen(heard.append)
    numbers = '{"download": {"files_done": 1, "files_total": 2, "bytes_done": 5, "bytes_total": 9}, "other": 1}'
    progress.converter_line(f"[  0.2s] downloading org/m: 1 of 2 files, 5 B of 9 B\t{numbers}")
    progress.converter_line("[  0.3s] a step whose numbers do not read\t{not json")
    download = {"files_done": 1, "files_total": 2, "bytes_done": 5, "bytes_total": 9}
    assert [(event["message"], event.get("download")) for event in heard] == [
        ("downloading org/m: 1 of 2 files, 5 B of 9 B", download),
        ("a step whose numbers do not read", None),
    ]
    assert "other" not in heard[0]
