"""Tiny sentence-transformers models with random weights, built at test time (no hub):
a BERT tokenizer from a small vocabulary, and each model class saved the way its library
saves it."""

from __future__ import annotations

from pathlib import Path

from tests import tiny_transformers
from tests.tiny_transformers import (  # noqa: F401 (what the tests use from here)
    CORPUS,
    INITIALIZER_RANGE,
    MAX_SEQ_LENGTH,
    WORDS,
    bert_config,
    bert_tokenizer,
    save_bert,
    torch_seed,
)


def dense_model(directory: Path, pooling: str = "mean", seed: int = 0) -> Path:
    from sentence_transformers import SentenceTransformer, models

    transformer_dir = save_bert(directory.parent / f"{directory.name}-bert", seed=seed)
    transformer = models.Transformer(str(transformer_dir), max_seq_length=64)
    pool = models.Pooling(transformer.get_embedding_dimension(), pooling_mode=pooling)
    SentenceTransformer(modules=[transformer, pool], device="cpu").save(str(directory))
    return directory


def cross_encoder(directory: Path, seed: int = 0, **options) -> Path:
    """A reranker (one label); ``options`` go to ``CrossEncoder`` (``prompts``, ``max_length``...)."""
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


def _save_sentence_transformer(directory: Path, transformer_dir: Path, pooling: str, after=()) -> Path:
    """Transformer -> Pooling(``pooling``) -> ``after`` modules, saved as sentence-transformers saves it."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    transformer = Transformer(str(transformer_dir), max_seq_length=MAX_SEQ_LENGTH)
    pool = Pooling(transformer.get_embedding_dimension(), pooling_mode=pooling)
    SentenceTransformer(modules=[transformer, pool, *after], device="cpu").save(str(directory))
    return directory


def _normalize():
    from sentence_transformers.base.modules import Normalize

    return Normalize()


def bert_cls_model(directory: Path, seed: int = 0) -> Path:
    """BERT with CLS pooling and Normalize (bge-style)."""
    bert_dir = save_bert(directory.parent / f"{directory.name}-bert", seed=seed, initializer_range=INITIALIZER_RANGE)
    return _save_sentence_transformer(directory, bert_dir, "cls", [_normalize()])


def bert_dense_model(directory: Path, seed: int = 0) -> Path:
    """BERT -> mean pooling -> Dense(32 -> 16, tanh) -> Normalize."""
    import torch
    from sentence_transformers.base.modules import Dense

    bert_dir = save_bert(directory.parent / f"{directory.name}-bert", seed=seed, initializer_range=INITIALIZER_RANGE)
    torch_seed(seed + 1)
    dense = Dense(32, 16, activation_function=torch.nn.Tanh())
    return _save_sentence_transformer(directory, bert_dir, "mean", [dense, _normalize()])


def xlm_roberta_model(directory: Path, seed: int = 0) -> Path:
    """XLM-RoBERTa with a Unigram tokenizer, mean pooling and Normalize (multilingual-e5-style)."""
    base = tiny_transformers.xlm_roberta(directory.parent / f"{directory.name}-xlmr", seed=seed)
    return _save_sentence_transformer(directory, base, "mean", [_normalize()])


def mpnet_model(directory: Path, seed: int = 0) -> Path:
    """MPNet with a WordPiece tokenizer, mean pooling and Normalize (all-mpnet-base-v2's layout)."""
    base = tiny_transformers.mpnet(directory.parent / f"{directory.name}-mpnet", seed=seed)
    return _save_sentence_transformer(directory, base, "mean", [_normalize()])


def modernbert_model(directory: Path, seed: int = 0) -> Path:
    """ModernBERT with a byte-level BPE tokenizer, ``[CLS] text [SEP]``, mean pooling and
    Normalize (nomic-modernbert-style)."""
    base = tiny_transformers.modernbert(directory.parent / f"{directory.name}-modernbert", seed=seed)
    return _save_sentence_transformer(directory, base, "mean", [_normalize()])


def qwen3_model(directory: Path, seed: int = 0) -> Path:
    """A decoder built as Qwen3-Embedding is: a byte-level BPE tokenizer whose
    post-processor appends <|endoftext|>, left padding, last-token pooling, Normalize."""
    base = tiny_transformers.qwen3(directory.parent / f"{directory.name}-qwen3", seed=seed)
    return _save_sentence_transformer(directory, base, "lasttoken", [_normalize()])


def routed_model(directory: Path, seed: int = 0, default_route: str | None = "document") -> Path:
    """An asymmetric model: one Transformer and mean pooling, then a Router with a
    different Dense head for queries and for documents (``Router.for_query_document``);
    ``default_route`` None: a text must name its task."""
    transformer_dir = save_bert(directory.parent / f"{directory.name}-bert", seed=seed, initializer_range=INITIALIZER_RANGE)
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Dense, Router, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    torch_seed(seed + 1)
    transformer = Transformer(str(transformer_dir), max_seq_length=MAX_SEQ_LENGTH)
    width = transformer.get_embedding_dimension()
    router = Router.for_query_document(
        query_modules=[Dense(width, 16)], document_modules=[Dense(width, 16)], default_route=default_route
    )
    modules = [transformer, Pooling(width, pooling_mode="mean"), router, _normalize()]
    SentenceTransformer(modules=modules, device="cpu").save(str(directory))
    return directory


def _mlm(directory: Path, seed: int):
    """A tiny BERT masked-language model as a sentence-transformers Transformer (fill-mask)."""
    from sentence_transformers.base.modules import Transformer

    mlm_dir = save_bert(directory, head="masked_lm", seed=seed, initializer_range=INITIALIZER_RANGE)
    return Transformer(str(mlm_dir), max_seq_length=MAX_SEQ_LENGTH, transformer_task="fill-mask")


def routed_sparse_model(directory: Path, seed: int = 0, default_route: str | None = "document") -> Path:
    """A SparseEncoder whose queries and documents go through SPLADE models of their own
    (a Router with two MLM transformers, max and sum pooling); ``default_route`` None: a
    text must name its task (encode without one is refused)."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Router
    from sentence_transformers.sparse_encoder.models import SpladePooling

    router = Router.for_query_document(
        query_modules=[_mlm(directory.parent / f"{directory.name}-query-mlm", seed), SpladePooling("max")],
        document_modules=[_mlm(directory.parent / f"{directory.name}-document-mlm", seed + 1), SpladePooling("sum")],
        default_route=default_route, allow_empty_key=default_route is not None,
    )
    SparseEncoder(modules=[router], device="cpu").save(str(directory))
    return directory


def inference_free_splade(directory: Path, seed: int = 0, **options) -> Path:
    """An inference-free sparse model, as OpenSearch's neural sparse models are built: a
    Router whose queries get a stored weight per vocabulary token (``SparseStaticEmbedding``,
    no transformer) and whose documents go through SPLADE; ``options`` go to ``SparseEncoder``."""
    import torch
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Router
    from sentence_transformers.sparse_encoder.models import SparseStaticEmbedding, SpladePooling

    mlm = _mlm(directory.parent / f"{directory.name}-mlm", seed)
    generator = torch.Generator().manual_seed(seed)
    # Weights of about idf's size; some tokens weigh nothing (a query keeps none of those).
    weight = torch.rand(len(mlm.tokenizer), generator=generator) * 6
    weight[torch.rand(len(weight), generator=generator) < 0.2] = 0.0
    static = SparseStaticEmbedding(tokenizer=mlm.tokenizer, weight=weight, frozen=True)
    router = Router.for_query_document(query_modules=[static], document_modules=[mlm, SpladePooling("max")])
    SparseEncoder(modules=[router], device="cpu", **options).save(str(directory))
    return directory


# Punctuation a ColBERT model drops from documents (its skiplist), and the markers it puts
# before queries and documents.
PUNCTUATION = list(".,?!;:")
QUERY_MARKER, DOCUMENT_MARKER = "[Q]", "[D]"
QUERY_EXPANSION = 24


def multi_vector_model(directory: Path, seed: int = 0, *, attend: bool = False) -> Path:
    """A ColBERT-style MultiVectorEncoder: BERT, a token-level Dense (32 -> 16), a
    MultiVectorMask that drops punctuation from documents, Normalize; queries expanded with
    [MASK] to 24 tokens (the encoder ``attend``s to them or not), documents cut at 48;
    ``[Q] `` and ``[D] `` markers (special tokens) as the query and document prompts."""
    import torch
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    torch_seed(seed)
    base = directory.parent / f"{directory.name}-bert"
    tokenizer = bert_tokenizer(base, extra=PUNCTUATION)
    tokenizer.add_special_tokens({"additional_special_tokens": [QUERY_MARKER, DOCUMENT_MARKER]})
    import transformers

    config = bert_config(len(tokenizer), initializer_range=INITIALIZER_RANGE)
    transformers.BertModel(config).eval().save_pretrained(str(base))
    tokenizer.save_pretrained(str(base))
    transformer = Transformer(
        str(base), max_seq_length=MAX_SEQ_LENGTH, document_length=48,
        query_expansion={"strategy": "fixed", "attend": attend, "length": QUERY_EXPANSION},
    )
    torch_seed(seed + 1)
    dense = Dense(32, 16, bias=False, activation_function=torch.nn.Identity(), module_input_name="token_embeddings")
    modules = [transformer, dense, MultiVectorMask(skiplist_words=PUNCTUATION), Normalize(module_input_name="token_embeddings")]
    prompts = {"query": f"{QUERY_MARKER} ", "document": f"{DOCUMENT_MARKER} "}
    MultiVectorEncoder(modules=modules, prompts=prompts, device="cpu").save(str(directory))
    return directory


# EmbeddingGemma's prompts (a few of them), as its config_sentence_transformers.json has them.
GEMMA_PROMPTS = {
    "query": "task: search result | query: ",
    "document": "title: none | text: ",
    "Classification": "task: classification | query: ",
}


def gemma3_embedding_model(directory: Path, seed: int = 0) -> Path:
    """Built as EmbeddingGemma is: a Gemma 3 text model with bidirectional attention (sliding
    window layers and a global one), ``<bos> text <eos>``, mean pooling, two Dense layers
    (32 -> 96 -> 32, no bias), Normalize, and query and document prompts."""
    import torch
    from sentence_transformers.base.modules import Dense

    base = tiny_transformers.gemma3(directory.parent / f"{directory.name}-gemma3", seed=seed)
    torch_seed(seed + 1)
    dense = [
        Dense(32, 96, bias=False, activation_function=torch.nn.Identity()),
        Dense(96, 32, bias=False, activation_function=torch.nn.Identity()),
    ]
    _save_sentence_transformer(directory, base, "mean", [*dense, _normalize()])
    config_file = directory / "config_sentence_transformers.json"
    import json

    settings = json.loads(config_file.read_text())
    settings["prompts"] = {**settings.get("prompts", {}), **GEMMA_PROMPTS}
    config_file.write_text(json.dumps(settings, indent=2))
    return directory


NLI_LABELS = ("contradiction", "entailment", "neutral")


def classifier(directory: Path, seed: int = 0, labels: tuple[str, ...] = NLI_LABELS) -> Path:
    """A BERT CrossEncoder with several labels (an NLI classifier: ``id2label`` names them)."""
    return cross_encoder_of("bert", directory, seed, labels)


def cross_encoder_of(
    architecture: str, directory: Path, seed: int = 0, labels: tuple[str, ...] = ("LABEL_0",), **options
) -> Path:
    """A CrossEncoder on ``architecture``'s sequence-classification head (tests/tiny_transformers.py):
    one label (a reranker) or several (a classifier, ``id2label`` naming them); ``options``
    go to ``CrossEncoder``."""
    from sentence_transformers import CrossEncoder

    base = tiny_transformers.TRANSFORMERS[architecture](
        directory.parent / f"{directory.name}-{architecture}", head="classification", seed=seed,
        num_labels=len(labels), id2label=dict(enumerate(labels)), label2id={label: i for i, label in enumerate(labels)},
    )
    CrossEncoder(str(base), device="cpu", **{"max_length": MAX_SEQ_LENGTH, **options}).save(str(directory))
    return directory


def sparse_encoder_of(architecture: str, directory: Path, seed: int = 0, pooling: str = "max") -> Path:
    """A SPLADE SparseEncoder on ``architecture``'s masked-LM head: its logits, SpladePooling."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sparse_encoder.models import SpladePooling

    base = tiny_transformers.TRANSFORMERS[architecture](
        directory.parent / f"{directory.name}-{architecture}-mlm", head="masked_lm", seed=seed
    )
    mlm = Transformer(str(base), max_seq_length=MAX_SEQ_LENGTH, transformer_task="fill-mask")
    SparseEncoder(modules=[mlm, SpladePooling(pooling)], device="cpu").save(str(directory))
    return directory


# name -> (builder, pooling) for the architecture tests.
ARCHITECTURES = {
    "bert-mean": (dense_model, "mean"),
    "bert-cls": (bert_cls_model, "cls"),
    "xlm-roberta": (xlm_roberta_model, "mean"),
    "mpnet": (mpnet_model, "mean"),
    "modernbert": (modernbert_model, "mean"),
    "qwen3": (qwen3_model, "lasttoken"),
    "bert-dense": (bert_dense_model, "mean"),
    "gemma3-bidirectional": (gemma3_embedding_model, "mean"),
}
