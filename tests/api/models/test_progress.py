"""Progress of long work: steps with elapsed seconds in the server log, and only the
converter's step lines (never its other output) handed to listeners."""

import logging

from embedgate.api.models.progress import Progress


def test_steps_are_logged_with_elapsed_seconds_and_told_to_listeners(caplog):
    heard = []
    progress = Progress("org/model")
    progress.listen(heard.append)
    with caplog.at_level(logging.INFO, logger="embedgate.progress"):
        progress.step("loading into Triton")
    assert "[org/model] [   0.0s] loading into Triton" in caplog.text
    assert heard == [{"event": "progress", "elapsed_s": 0.0, "message": "loading into Triton"}]


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
