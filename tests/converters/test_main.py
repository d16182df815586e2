"""The ``python -m converters`` protocol, with a fake converter in place of torch (fast)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from tests.helpers import python_path

REPO_ROOT = Path(__file__).resolve().parents[2]

FAKE_CONVERTER = textwrap.dedent(
    """
    import os, sys, time
    from embedgate.contract.spec import ModelMetadata, ParityResult
    from tests.converters.fake_kinds import tiny_onnx

    def convert(spec, out_dir, step):
        step("fake conversion")
        print("stray print from a library")
        os.write(1, b"stray write on file descriptor 1\\n")
        (out_dir / "1").mkdir()
        tiny_onnx(out_dir / "1" / "model.onnx")
        if spec.model_name == "slow":
            step("sleeping")
            time.sleep(60)
        if spec.model_name == "broken":
            step("exporting the graph")
            raise RuntimeError("unordered_map::at")
        return ModelMetadata(
            model_name=spec.model_name, triton_name=spec.triton_name, source="fake", library="fake",
            library_version="0", embedding_dim=8, max_seq_length=16, normalized=True,
            form=spec.triton.form, max_batch_size=spec.triton.max_batch_size,
            parity=ParityResult(passed=True, threshold=0.9999, min_cosine=1.0, sentences=1),
            created_at="2024-01-01T00:00:00+00:00", conversion_seconds=0.0,
        )
    """
)
RUNNER = textwrap.dedent(
    """
    import sys
    import embedgate.converters.__main__ as entry
    from tests.converters.fake_kinds import install
    install(sentence_transformers="fake_converter")
    sys.exit(entry.main())
    """
)


@pytest.fixture
def fake_env(tmp_path):
    (tmp_path / "fake_converter.py").write_text(FAKE_CONVERTER)
    (tmp_path / "runner.py").write_text(RUNNER)
    env = dict(os.environ, PYTHONPATH=python_path(REPO_ROOT, tmp_path))
    return tmp_path, env


def start(fake_env, spec) -> subprocess.Popen:
    tmp_path, env = fake_env
    process = subprocess.Popen(
        [sys.executable, str(tmp_path / "runner.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    process.stdin.write(spec if isinstance(spec, str) else json.dumps(spec))
    process.stdin.close()
    return process


def finish(process: subprocess.Popen) -> tuple[int, list[str], str]:
    stdout = process.stdout.read()
    stderr = process.stderr.read()
    return process.wait(timeout=60), stdout.strip().splitlines(), stderr


def spec_for(repository: Path, **overrides) -> dict:
    return {"model_name": "fake", "triton_name": "fake", "repository": str(repository), **overrides}


def test_success_prints_only_the_metadata_and_publishes(fake_env, tmp_path):
    repository = tmp_path / "repo"
    code, stdout, stderr = finish(start(fake_env, spec_for(repository)))

    assert code == 0, stderr
    assert len(stdout) == 1
    assert json.loads(stdout[0]) == json.loads((repository / "fake" / "metadata.json").read_text())
    assert "stray print from a library" in stderr
    assert "stray write on file descriptor 1" in stderr
    assert (repository / "fake" / "1" / "model.py").is_file()
    config = text_format.Parse((repository / "fake" / "config.pbtxt").read_text(), pb.ModelConfig())
    assert (config.name, config.backend, list(config.output[0].dims)) == ("fake", "python", [8])
    assert sorted(p.name for p in repository.iterdir()) == ["fake"]


def test_the_metadata_records_what_the_model_was_made_from_and_replace_publishes_in_place(fake_env, tmp_path):
    from embedgate.contract.sources import fingerprint

    repository, source = tmp_path / "repo", tmp_path / "source"
    source.mkdir()
    (source / "config.json").write_text('{"v": 1}')
    code, stdout, stderr = finish(start(fake_env, spec_for(repository, model_path=str(source))))
    assert code == 0, stderr
    made_from = json.loads((repository / "fake" / "metadata.json").read_text())["made_from"]
    assert made_from == {"type": "directory", "location": str(source.resolve()), "revision": None,
                         "fingerprint": fingerprint(source)}
    # The source changed: converted again with replace, the new copy takes the old one's place.
    (source / "config.json").write_text('{"v": 2}')
    code, _, stderr = finish(start(fake_env, spec_for(repository, model_path=str(source))))
    assert code == 4, stderr  # without replace, the published model stays
    code, stdout, stderr = finish(start(fake_env, spec_for(repository, model_path=str(source), replace=True)))
    assert code == 0, stderr
    replaced = json.loads((repository / "fake" / "metadata.json").read_text())["made_from"]
    assert replaced["fingerprint"] == fingerprint(source) != made_from["fingerprint"]
    assert sorted(p.name for p in repository.iterdir()) == ["fake"]


def test_an_error_without_words_of_its_own_says_the_step_it_stopped_in(fake_env, tmp_path):
    code, stdout, _ = finish(start(fake_env, spec_for(tmp_path / "repo", model_name="broken")))
    assert code == 1
    error = json.loads(stdout[-1])["error"]
    assert error == "conversion failed while exporting the graph: RuntimeError: unordered_map::at"


def test_onnxruntime_form_has_no_model_py(fake_env, tmp_path):
    repository = tmp_path / "repo"
    spec = spec_for(repository, triton={"form": "onnxruntime", "instance_kind": "gpu"})
    code, _, stderr = finish(start(fake_env, spec))

    assert code == 0, stderr
    assert not (repository / "fake" / "1" / "model.py").exists()
    config = text_format.Parse((repository / "fake" / "config.pbtxt").read_text(), pb.ModelConfig())
    assert config.platform == "onnxruntime_onnx"


def test_existing_target_exits_4_unless_replace(fake_env, tmp_path):
    repository = tmp_path / "repo"
    (repository / "fake").mkdir(parents=True)

    code, stdout, _ = finish(start(fake_env, spec_for(repository)))
    assert code == 4
    assert "already exists" in json.loads(stdout[-1])["error"]

    code, _, stderr = finish(start(fake_env, spec_for(repository, replace=True)))
    assert code == 0, stderr
    assert (repository / "fake" / "metadata.json").is_file()


@pytest.mark.parametrize(
    "spec, message",
    [
        ("not json", "invalid conversion spec"),
        (json.dumps({"model_name": "fake"}), "triton_name"),
        (
            json.dumps(
                {"model_name": "f", "triton_name": "f", "repository": "/tmp", "variant": "int8",
                 "triton": {"instance_kind": "gpu"}}
            ),
            "variants run on CPU instances",
        ),
    ],
    ids=["not-json", "missing-fields", "python-form-variant-on-gpu"],
)
def test_bad_specs_exit_1_with_a_one_line_error(fake_env, spec, message):
    code, stdout, stderr = finish(start(fake_env, spec))

    assert code == 1
    assert len(stdout) == 1
    assert message in json.loads(stdout[0])["error"]


def test_progress_lines_have_elapsed_seconds(fake_env, tmp_path):
    _, _, stderr = finish(start(fake_env, spec_for(tmp_path / "repo")))

    assert any(line.endswith("] fake conversion") and line.startswith("[  0.") for line in stderr.splitlines())


def test_sigterm_cancels_and_removes_the_staging(fake_env, tmp_path):
    repository = tmp_path / "repo"
    process = start(fake_env, spec_for(repository, model_name="slow"))
    for line in process.stderr:
        if "sleeping" in line:
            break
    assert any((repository / ".staging").iterdir())

    process.send_signal(signal.SIGTERM)
    code, stdout, _ = finish(process)

    assert code == 143
    assert json.loads(stdout[-1]) == {"error": "conversion cancelled"}
    assert list(repository.iterdir()) == []
