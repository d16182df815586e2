"""Tiny sentence-transformers models with random weights, built at test time (no hub):
a BERT tokenizer from a small vocabulary, and each model class saved the way its library
saves it."""

from __future__ import annotations

from pathlib import Path

from embedgate.converters.torch_compat import ensure_torchvision_importable

WORDS = (
    "the a an is are was of to and in on for with as by at it this that "
    "hello world model server text query document search embedding quick brown fox jumps "
    "over lazy dog man eating food movie awesome stocks fell bank"
).split()


def bert_tokenizer(directory: Path):
    ensure_torchvision_importable()
    from transformers import BertTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *(f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz")]
    # transformers 5 takes the vocabulary as ``vocab`` (``vocab_file`` is silently ignored,
    # leaving only the special tokens: every word would be [UNK]).
    tokenizer = BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab)}, do_lower_case=True)
    assert len(tokenizer) == len(vocab), "the tokenizer did not take the vocabulary"
    return tokenizer


def bert_config(vocab_size: int, **extra):
    from transformers import BertConfig

    return BertConfig(
        vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=37, max_position_embeddings=128, **extra,
    )


def _torch_seed(seed: int) -> None:
    import torch

    torch.manual_seed(seed)


def save_bert(directory: Path, head: str = "base", seed: int = 0, **config) -> Path:
    """A tiny BERT (``head``: base, sequence classification or masked LM) and its tokenizer."""
    _torch_seed(seed)
    tokenizer = bert_tokenizer(directory)
    import transformers

    model_class = {
        "base": transformers.BertModel,
        "classification": transformers.BertForSequenceClassification,
        "masked_lm": transformers.BertForMaskedLM,
    }[head]
    if head == "classification":
        # With BERT's usual initialization every pair scores 0.4923...: the scores differ in
        # the fifth decimal. Wider weights spread them over (0, 1), so a test can tell them
        # apart (and a wrong score fails).
        config.setdefault("initializer_range", 0.5)
    model = model_class(bert_config(len(tokenizer), **config)).eval()
    model.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory


def dense_model(directory: Path, pooling: str = "mean", seed: int = 0) -> Path:
    ensure_torchvision_importable()
    from sentence_transformers import SentenceTransformer, models

    transformer_dir = save_bert(directory.parent / f"{directory.name}-bert", seed=seed)
    transformer = models.Transformer(str(transformer_dir), max_seq_length=64)
    pool = models.Pooling(transformer.get_embedding_dimension(), pooling_mode=pooling)
    SentenceTransformer(modules=[transformer, pool], device="cpu").save(str(directory))
    return directory


def cross_encoder(directory: Path, seed: int = 0, **options) -> Path:
    """A reranker (one label); ``options`` go to ``CrossEncoder`` (``prompts``, ``max_length``...)."""
    ensure_torchvision_importable()
    from sentence_transformers import CrossEncoder

    bert_dir = save_bert(directory.parent / f"{directory.name}-bert", head="classification", seed=seed, num_labels=1)
    CrossEncoder(str(bert_dir), device="cpu", **{"max_length": 64, **options}).save(str(directory))
    return directory


def legacy_cross_encoder(directory: Path, seed: int = 0) -> Path:
    """A CrossEncoder as saved before config_sentence_transformers.json: a plain
    sequence-classification model."""
    return save_bert(directory, head="classification", seed=seed, num_labels=1)


def sparse_encoder(directory: Path, seed: int = 0, **options) -> Path:
    """A SPLADE model: an MLM transformer and SpladePooling; ``options`` go to
    ``SparseEncoder`` (``max_active_dims``, ``prompts``...)."""
    mlm_dir = save_bert(directory.parent / f"{directory.name}-mlm", head="masked_lm", seed=seed)
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sparse_encoder.models import SpladePooling

    mlm = Transformer(str(mlm_dir), max_seq_length=64, transformer_task="fill-mask")
    SparseEncoder(modules=[mlm, SpladePooling("max")], device="cpu", **options).save(str(directory))
    return directory
