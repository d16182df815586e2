"""A small model directory, as the converter stages one, and its metadata."""

from __future__ import annotations

from pathlib import Path

from embedgate.contract.spec import ModelMetadata, ParityResult


def metadata(name: str, dim: int = 8) -> ModelMetadata:
    return ModelMetadata(
        model_name=name, triton_name=name, source="test", library="test", library_version="0",
        embedding_dim=dim, max_seq_length=16, normalized=True, form="python", max_batch_size=8,
        parity=ParityResult(passed=True, threshold=0.9999, min_cosine=1.0, sentences=1),
        created_at="2026-01-01T00:00:00+00:00", conversion_seconds=0.0,
    )


def write_model(directory: Path, name: str, *, tokenizer: str = '{"v": 1}', dim: int = 8) -> None:
    (directory / "1").mkdir(parents=True, exist_ok=True)
    (directory / "1" / "model.onnx").write_bytes(b"onnx bytes " * 1000)
    (directory / "1" / "model.py").write_text("# python backend model\n")
    (directory / "tokenizer").mkdir(exist_ok=True)
    (directory / "tokenizer" / "tokenizer.json").write_text(tokenizer)
    (directory / "metadata.json").write_text(metadata(name, dim).model_dump_json())
    (directory / "config.pbtxt").write_text(f'name: "{name}"\n')
