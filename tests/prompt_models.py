"""A tiny random sentence-transformer with prompts, as e5 declares them ("query" and
"passage", no "document"), and a default prompt, built at test time (no hub)."""

from __future__ import annotations

import json
from pathlib import Path

from tests import tiny_models

PROMPTS = {"query": "search query: ", "passage": "search document: "}
DEFAULT_PROMPT_NAME = "query"


def prompts_model(directory: Path, seed: int = 0) -> Path:
    """tiny_models.dense_model, its config_sentence_transformers.json given PROMPTS and
    DEFAULT_PROMPT_NAME (as a model on the hub carries them)."""
    return _with_prompts(tiny_models.dense_model(directory, seed=seed))


def _with_prompts(directory: Path) -> Path:
    """A saved model's config_sentence_transformers.json given PROMPTS and DEFAULT_PROMPT_NAME."""
    config_file = directory / "config_sentence_transformers.json"
    config = json.loads(config_file.read_text())
    config["prompts"] = dict(PROMPTS)
    config["default_prompt_name"] = DEFAULT_PROMPT_NAME
    config_file.write_text(json.dumps(config, indent=2))
    return directory


def prompts_left_out_model(directory: Path, pooling: str = "mean", seed: int = 0) -> Path:
    """An INSTRUCTOR-style model: a tiny BERT whose Pooling leaves the prompt's tokens out
    (``include_prompt=False``), with PROMPTS and DEFAULT_PROMPT_NAME."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    bert_dir = tiny_models.save_bert(directory.parent / f"{directory.name}-bert", seed=seed)
    transformer = Transformer(str(bert_dir), max_seq_length=tiny_models.MAX_SEQ_LENGTH)
    pool = Pooling(transformer.get_embedding_dimension(), pooling_mode=pooling, include_prompt=False)
    SentenceTransformer(
        modules=[transformer, pool], device="cpu", prompts=dict(PROMPTS), default_prompt_name=DEFAULT_PROMPT_NAME
    ).save(str(directory))
    return directory


def prompts_dense_model(directory: Path, seed: int = 0) -> Path:
    """tiny_models.bert_dense_model (mean pooling, then Dense and Normalize) with PROMPTS and
    DEFAULT_PROMPT_NAME."""
    return _with_prompts(tiny_models.bert_dense_model(directory, seed=seed))
