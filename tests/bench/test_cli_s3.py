"""The in-process baseline reading the served ONNX file from an S3 repository."""

import pytest

from embedgate.bench import cli


def test_a_model_missing_from_the_bucket_is_named(s3_bucket, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--inprocess-only", "--requests", "2", "--model-repository", s3_bucket.url])
    message = str(exc.value.code)
    assert message.startswith("in-process baseline:") and "not in the repository" in message
    assert f"{s3_bucket.url}/sentence-transformers--all-MiniLM-L6-v2" in message
