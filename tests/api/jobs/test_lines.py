"""Batch files are checked on upload, with the first bad line's number."""

import json

import pytest

from embedgate.api.errors import InvalidBatchFile
from embedgate.api.jobs import lines
from embedgate.api.jobs.chunks import Measure, plan
from embedgate.api.jobs.records import Line

URLS = ("/v1/embeddings",)


def request(custom_id="a", url="/v1/embeddings", **extra):
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": {"input": "x"}, **extra})


def upload(tmp_path, *rows, ending="\n"):
    path = tmp_path / "batch.jsonl"
    path.write_text("\n".join(rows) + ending)
    return path


def test_a_good_file_counts_its_requests_and_may_end_with_blank_lines(tmp_path):
    assert lines.check_upload(upload(tmp_path, request("a"), request("b"), ending="\n\n\n"), URLS, 10) == 2
    assert lines.check_upload(upload(tmp_path, request("a"), ending=""), URLS, 10) == 1


@pytest.mark.parametrize(
    "bad, why",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "not a JSON object"),
        ("", "empty line"),
        (request("a"), "custom_id 'a' appears twice"),
        (request("b", url="/v1/chat/completions"), "url '/v1/chat/completions'"),
        (json.dumps({"custom_id": "b", "method": "GET", "url": "/v1/embeddings", "body": {}}), "method must be POST"),
        (json.dumps({"custom_id": "b", "method": "POST", "url": "/v1/embeddings", "body": []}), "body must be"),
        (json.dumps({"custom_id": "", "method": "POST", "url": "/v1/embeddings", "body": {}}), "custom_id must be"),
        (request("b", extra_field=1), "unknown fields ['extra_field']"),
    ],
)
def test_the_first_bad_line_is_named(tmp_path, bad, why):
    with pytest.raises(InvalidBatchFile, match=r"^line 2: ") as refused:
        lines.check_upload(upload(tmp_path, request("a"), bad, request("c")), URLS, 10)
    assert refused.value.line == 2 and why in str(refused.value)


def test_too_many_requests_and_no_requests_are_refused(tmp_path):
    with pytest.raises(InvalidBatchFile, match="line 3: more than 2 requests"):
        lines.check_upload(upload(tmp_path, request("a"), request("b"), request("c")), URLS, 2)
    with pytest.raises(InvalidBatchFile, match="no requests"):
        lines.check_upload(upload(tmp_path, "", ending="\n"), URLS, 2)


def test_lines_are_read_back_from_their_offsets(tmp_path):
    path = upload(tmp_path, request("a"), request("ü-b"), request("c"))
    placed = {line.number: line for line, _ in lines.iterate(path)}
    read = lines.read(path, (placed[3], placed[2]))
    assert [(r.number, r.custom_id) for r in read] == [(3, "c"), (2, "ü-b")]


def test_chunks_hold_one_model_sorted_by_length_and_never_split_a_line():
    bodies = [("m1", 5, 2), ("m2", 1, 1), ("m1", 50, 1), ("m1", 1, 3), ("m1", 20, 2)]
    entries = [(Line(n, 0, 0), {"m": m, "len": length, "n": count}) for n, (m, length, count) in enumerate(bodies, 1)]
    chunks = plan("batch_x", entries, lambda b: Measure(b["m"], b["n"], b["len"]), chunk_texts=4)
    described = [(c.model, [line.number for line in c.lines], c.texts) for c in chunks]
    # m1's lines by length: 4 (1 char, 3 texts), 1 (5, 2), 5 (20, 2), 3 (50, 1); then m2.
    assert described == [("m1", [4], 3), ("m1", [1, 5], 4), ("m1", [3], 1), ("m2", [2], 1)]
    assert [c.index for c in chunks] == [0, 1, 2, 3]
