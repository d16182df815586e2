"""Tiny static embedding models (``StaticEmbedding``: model2vec's and static-retrieval-mrl's
layout) with random vectors, built at test time (no hub): the BERT tokenizer of
tests/tiny_models.py, a vector per token, perhaps Normalize after it."""

from __future__ import annotations

from pathlib import Path

from tests import tiny_models


def static_model(
    directory: Path, *, dim: int = 24, normalize: bool = True, max_length: int | None = None, seed: int = 0, **options
) -> Path:
    """A ``SentenceTransformer(modules=[StaticEmbedding, Normalize])`` saved as the library
    saves it; ``max_length``: its tokenizer cuts texts there (none by default, as most do);
    ``options`` go to ``SentenceTransformer`` (``prompts``...)."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding

    tokenizer = tiny_models.bert_tokenizer(directory.parent / f"{directory.name}-tokenizer")
    torch.manual_seed(seed)
    module = StaticEmbedding(tokenizer, embedding_dim=dim)
    if max_length is not None:
        module.tokenizer.enable_truncation(max_length=max_length)
    modules = [module, Normalize()] if normalize else [module]
    SentenceTransformer(modules=modules, device="cpu", **options).save(str(directory))
    return directory


def static_query_model(directory: Path, seed: int = 0) -> Path:
    """An asymmetric model: a StaticEmbedding for queries (computed by the gateway) and a
    tiny BERT with mean pooling for documents, then Normalize (``Router.for_query_document``,
    the document route the default)."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Router, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling, StaticEmbedding

    bert_dir = tiny_models.save_bert(directory.parent / f"{directory.name}-bert", seed=seed)
    transformer = Transformer(str(bert_dir), max_seq_length=tiny_models.MAX_SEQ_LENGTH)
    width = transformer.get_embedding_dimension()
    torch.manual_seed(seed)
    static = StaticEmbedding(tiny_models.bert_tokenizer(directory.parent / f"{directory.name}-tokenizer"), embedding_dim=width)
    router = Router.for_query_document(query_modules=[static], document_modules=[transformer, Pooling(width)])
    SentenceTransformer(modules=[router, Normalize()], device="cpu").save(str(directory))
    return directory
