"""``python -m converters`` publishing to an S3 repository (moto_server on 127.0.0.1), with a
fake converter in place of torch (fast): staged locally, uploaded config last, and nothing
left in the bucket by a failed, cancelled or interrupted conversion."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.converters.test_clip_publish import FAKE_CLIP_CONVERTER
from tests.helpers import python_path
from tests.s3 import SECRET_ACCESS_KEY

REPO_ROOT = Path(__file__).resolve().parents[2]
FAKE_CONVERTER = textwrap.dedent(
    """
    import time
    from embedgate.contract.errors import ParityError
    from embedgate.contract.spec import ModelMetadata, ParityResult
    from tests.converters.fake_kinds import tiny_onnx

    def convert(spec, out_dir, step):
        step("fake conversion")
        (out_dir / "1").mkdir()
        for part in range(4):
            (out_dir / "1" / f"weights-{part}.bin").write_bytes(b"w" * 1024)
        tiny_onnx(out_dir / "1" / "model.onnx")
        (out_dir / "tokenizer").mkdir()
        (out_dir / "tokenizer" / "tokenizer.json").write_text("{}")
        if spec.model_name == "diverging":
            raise ParityError("parity check failed: min cosine 0.5 < 0.9999")
        return ModelMetadata(
            model_name=spec.model_name, triton_name=spec.triton_name, source="fake", library="fake",
            library_version="0", embedding_dim=8, max_seq_length=16, normalized=True,
            form=spec.triton.form, max_batch_size=spec.triton.max_batch_size,
            parity=ParityResult(passed=True, threshold=0.9999, min_cosine=1.0, sentences=1),
            created_at="2024-01-01T00:00:00+00:00", conversion_seconds=0.0,
        )
    """
)
# The fake CLIP converter, and for "race" another conversion publishing the text part
# (its config) into the bucket while this one runs.
RACING_CLIP_CONVERTER = textwrap.dedent(
    """
    import boto3
    from botocore.config import Config
    from embedgate.contract.repository import parse_s3
    import fake_clip_converter

    def convert(spec, text_dir, image_dir, step):
        if spec.model_name == "race":
            location = parse_s3(spec.repository)
            client = boto3.client(
                "s3", endpoint_url=location.endpoint_url, config=Config(s3={"addressing_style": "path"})
            )
            key = location.key(spec.triton_name + "_text_encoder", "config.pbtxt")
            client.put_object(Bucket=location.bucket, Key=key, Body=b"")
        return fake_clip_converter.convert(spec, text_dir, image_dir, step)
    """
)
# The second upload held up, so that a SIGTERM lands in the middle of publishing
# however slowly the test sees the first one.
RUNNER = textwrap.dedent(
    """
    import sys, time
    import embedgate.converters.__main__ as entry
    from tests.converters.fake_kinds import install
    install(sentence_transformers="fake_converter", open_clip="racing_clip_converter")
    if "--slow-upload" in sys.argv:
        import boto3.s3.inject

        upload_file = boto3.s3.inject.upload_file
        uploads = []

        def slow_upload_file(self, *args, **kwargs):
            uploads.append(args)
            if len(uploads) > 1:
                time.sleep(60)
            return upload_file(self, *args, **kwargs)

        # Each client gets a class of its own, given this module's upload_file when made.
        boto3.s3.inject.upload_file = slow_upload_file
    sys.exit(entry.main())
    """
)


@pytest.fixture
def converter(tmp_path, s3_bucket):
    (tmp_path / "fake_converter.py").write_text(FAKE_CONVERTER)
    (tmp_path / "fake_clip_converter.py").write_text(FAKE_CLIP_CONVERTER)
    (tmp_path / "racing_clip_converter.py").write_text(RACING_CLIP_CONVERTER)
    (tmp_path / "runner.py").write_text(RUNNER)
    env = dict(os.environ, PYTHONPATH=python_path(REPO_ROOT, tmp_path))

    def start(*args: str, **overrides) -> subprocess.Popen:
        spec = {
            "model_name": "fake", "triton_name": "fake", "repository": s3_bucket.url,
            "repository_cache_dir": str(tmp_path / "cache"), **overrides,
        }
        process = subprocess.Popen(
            [sys.executable, str(tmp_path / "runner.py"), *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
        process.stdin.write(json.dumps(spec))
        process.stdin.close()
        return process

    return start


def finish(process: subprocess.Popen) -> tuple[int, dict, str]:
    stdout, stderr = process.stdout.read(), process.stderr.read()
    return process.wait(timeout=60), json.loads(stdout.strip().splitlines()[-1]), stderr


def test_publishes_into_the_bucket_and_stages_nothing_in_it(converter, s3_bucket, tmp_path):
    code, result, stderr = finish(converter())
    assert code == 0, stderr
    assert result["triton_name"] == "fake"
    assert s3_bucket.keys() == [
        "fake/1/batch_layout.py", "fake/1/model.onnx", "fake/1/model.onnx.data", "fake/1/model.py", "fake/1/torch_graphs.py",
        *(f"fake/1/weights-{n}.bin" for n in range(4)),
        "fake/config.pbtxt", "fake/metadata.json", "fake/tokenizer/tokenizer.json",
    ]
    assert f"publishing to {s3_bucket.url}/fake" in stderr
    assert [p for p in (tmp_path / "cache").rglob("*") if p.is_file()] == []
    assert SECRET_ACCESS_KEY not in stderr


def test_a_failed_parity_check_uploads_nothing(converter, s3_bucket):
    code, result, _ = finish(converter(model_name="diverging"))
    assert code == 3 and "parity" in result["error"]
    assert s3_bucket.keys() == []


def test_sigterm_in_the_middle_of_the_upload_takes_back_what_was_uploaded(converter, s3_bucket, tmp_path):
    process = converter("--slow-upload")
    deadline = time.monotonic() + 30
    while not s3_bucket.keys() and time.monotonic() < deadline:
        time.sleep(0.05)
    uploaded = s3_bucket.keys()
    assert len(uploaded) == 1 and "fake/config.pbtxt" not in uploaded  # held at the second file

    process.send_signal(signal.SIGTERM)
    code, result, _ = finish(process)

    assert (code, result) == (143, {"error": "conversion cancelled"})
    assert s3_bucket.keys() == []
    assert [p for p in (tmp_path / "cache").rglob("*") if p.is_file()] == []


def test_a_name_taken_in_the_bucket_exits_4(converter, s3_bucket):
    assert finish(converter())[0] == 0
    code, result, _ = finish(converter())
    assert code == 4 and "already exists" in result["error"]


CLIP = {"library": "open_clip", "model_name": "ViT-X", "pretrained": "tag", "triton_name": "ViT-X_tag"}


def test_a_clip_models_two_parts_are_published_into_the_bucket(converter, s3_bucket):
    code, metadata, stderr = finish(converter(**CLIP))
    assert code == 0, stderr
    keys = s3_bucket.keys()
    for part in ("ViT-X_tag_text_encoder", "ViT-X_tag_image_encoder"):
        assert {f"{part}/config.pbtxt", f"{part}/metadata.json", f"{part}/1/model.onnx"} <= set(keys)
    assert "ViT-X_tag_text_encoder/tokenizer/tokenizer.json" in keys


def test_a_failed_text_publish_takes_the_image_part_back_from_the_bucket(converter, s3_bucket):
    code, answer, _ = finish(converter(**{**CLIP, "model_name": "race", "triton_name": "race_tag"}))
    assert code == 4 and "already exists" in answer["error"]
    assert s3_bucket.keys() == ["race_tag_text_encoder/config.pbtxt"]  # only the other conversion's


def test_an_unreachable_repository_exits_7_naming_it(converter, s3_bucket):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"s3://127.0.0.1:{sock.getsockname()[1]}/{s3_bucket.name}/models"
    code, result, stderr = finish(converter(repository=closed))
    assert code == 7 and closed in result["error"]
    assert SECRET_ACCESS_KEY not in stderr
