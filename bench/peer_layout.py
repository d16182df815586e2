"""A copy of a benchmark model that a peer server built on sentence-transformers 3 loads.

``python -m embedgate.bench.peer_layout --model-path DIR --out DIR``: the models of
``bench/random_models.py`` are saved by sentence-transformers 6, whose ``modules.json``
names module classes that sentence-transformers 3 lacks (``sentence_transformers.base...``)
and whose module configs use other keys. infinity-emb 0.0.78 runs sentence-transformers 3
and transformers 4, so the GPU sweep's peer (``PEER=infinity`` in ``bench/gpu_sweep.sh``)
serves this copy: the same weights and tokenizer, the stack written as version 3 reads it
(Transformer, mean or CLS pooling, Normalize where the model has it). Only that stack is
written; any other module is refused.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

_V3 = "sentence_transformers.models."
# Version 6's pooling modes, as version 3's Pooling config names them.
_POOLING_KEYS = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token"}


def _kind(type_name: str) -> str:
    return type_name.rsplit(".", 1)[-1]


def write(model_dir: Path, out: Path) -> Path:
    modules = json.loads((model_dir / "modules.json").read_text())
    kinds = [_kind(module["type"]) for module in modules]
    if kinds[:2] != ["Transformer", "Pooling"] or kinds[2:] not in ([], ["Normalize"]):
        raise SystemExit(f"{model_dir}: only Transformer, Pooling[, Normalize] is written, not {kinds}")
    pooling = json.loads((model_dir / modules[1]["path"] / "config.json").read_text())
    if pooling["pooling_mode"] not in _POOLING_KEYS:
        raise SystemExit(f"{model_dir}: pooling {pooling['pooling_mode']!r} is not written")
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(model_dir, out)
    (out / "config_sentence_transformers.json").unlink(missing_ok=True)
    tokenizer = json.loads((model_dir / "tokenizer_config.json").read_text())
    (out / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": int(tokenizer["model_max_length"]), "do_lower_case": False})
    )
    (out / modules[1]["path"] / "config.json").write_text(
        json.dumps({"word_embedding_dimension": pooling["embedding_dimension"], _POOLING_KEYS[pooling["pooling_mode"]]: True})
    )
    (out / "modules.json").write_text(
        json.dumps([{**module, "type": _V3 + kind} for module, kind in zip(modules, kinds)], indent=2)
    )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-path", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    print(write(args.model_path, args.out))


if __name__ == "__main__":
    main()
