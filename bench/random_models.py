"""Sentence-transformers models of a given size with random weights, for speed runs where
no model hub is reachable: a BERT encoder of ``--layers`` x ``--hidden`` with mean pooling
and normalization, or with ``--static DIM`` a static embedding model (a ``StaticEmbedding``
of DIM per token, then Normalize), and the WordPiece tokenizer of ``--tokenizer`` (a model
directory). The speed of a model depends on its shape, not on its weights.

``python -m embedgate.bench.random_models --tokenizer DIR --layers 12 --hidden 768 --out DIR``
(12 x 768: a base-size model such as bge-base or e5-base; 6 x 384: all-MiniLM-L6-v2's shape;
``--static 1024`` with MiniLM's tokenizer: static-retrieval-mrl-en-v1's shape, the
bert-base-uncased vocabulary, 30,522 x 1,024).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path


def build(tokenizer_dir: Path, out: Path, layers: int, hidden: int, max_seq_length: int = 256, seed: int = 0) -> Path:
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 64),
        intermediate_size=4 * hidden,
        max_position_embeddings=512,
    )
    with tempfile.TemporaryDirectory() as staging:
        BertModel(config).save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        transformer = models.Transformer(staging, max_seq_length=max_seq_length)
        pooling = models.Pooling(transformer.get_word_embedding_dimension(), pooling_mode="mean")
        SentenceTransformer(modules=[transformer, pooling, models.Normalize()], device="cpu").save(str(out))
    return out


def build_static(tokenizer_dir: Path, out: Path, dim: int, seed: int = 0) -> Path:
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding
    from transformers import AutoTokenizer

    torch.manual_seed(seed)
    static = StaticEmbedding(AutoTokenizer.from_pretrained(str(tokenizer_dir)), embedding_dim=dim)
    SentenceTransformer(modules=[static, Normalize()], device="cpu").save(str(out))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Build a random-weight sentence-transformers model.")
    parser.add_argument("--tokenizer", type=Path, required=True, help="a model directory with a WordPiece tokenizer")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--max-seq-length", type=int, default=256)
    parser.add_argument("--static", type=int, metavar="DIM", help="a static embedding model of DIM per token instead")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.static:
        print(build_static(args.tokenizer, args.out, args.static))
        return
    print(build(args.tokenizer, args.out, args.layers, args.hidden, args.max_seq_length))


if __name__ == "__main__":
    main()
