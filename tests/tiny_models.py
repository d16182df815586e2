"""Tiny sentence-transformers models with random weights, built at test time (no hub):
a BERT tokenizer from a small vocabulary, and each model class saved the way its library
saves it."""

from __future__ import annotations

from pathlib import Path

WORDS = (
    "the a an is are was of to and in on for with as by at it this that "
    "hello world model server text query document search embedding quick brown fox jumps "
    "over lazy dog man eating food movie awesome stocks fell bank"
).split()


def bert_tokenizer(directory: Path, extra: list[str] = ()):
    """A BERT WordPiece tokenizer over WORDS (and ``extra`` tokens)."""
    from transformers import BertTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *extra, *(f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz")]
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
    # With BERT's usual initialization (0.02) attention is nearly uniform: every text embeds
    # to nearly the same vector and every pair scores 0.4923..., so a wrong mask, position,
    # pooled token or score would still pass. Wider weights make texts differ (the tests
    # check that their references do).
    config.setdefault("initializer_range", INITIALIZER_RANGE)
    model = model_class(bert_config(len(tokenizer), **config)).eval()
    model.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory


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


# --- the architectures people serve, each tiny: hidden 32, 2 or 3 layers, max_seq_length 64 ---

MAX_SEQ_LENGTH = 64
# Weights drawn wider than the 0.02 of a fresh pretrained config: with that, attention is
# nearly uniform and every text embeds to nearly the same vector, so a wrong position, mask
# or pooled token would still pass a cosine check. With these, such mistakes show.
INITIALIZER_RANGE = 0.5
# What the trained tokenizers learn from: enough words that the parity sentences and the
# tests' texts split into several pieces, a few accents so Unicode normalization matters.
CORPUS = (
    "the quick brown fox jumps over the lazy dog",
    "hello world, this is a small embedding model",
    "a man is eating food while watching a movie",
    "stocks fell sharply at the bank on monday",
    "embedding servers batch requests of different lengths",
    "how do I convert a model to onnx and serve it with triton?",
    "the search engine ranks every document for a query",
    "first line. second line. third line after a blank one.",
    "what is the capital of france? paris is the capital.",
    "numbers such as 3.14159, 2718 and 100% appear in text",
    "def square(x): return x ** 2  # code and a comment",
    "MiXeD CaSe ShOuTiNg AND lower case words",
    "a café in the façade of a naïve old building",
    "Ünïcödé text, Привет мир and 日本語のテキスト",
    "the movie was awesome and the food was great",
    "servers and models answer queries with vectors",
    "tokenizers split words into pieces from a vocabulary",
    "padding on the left or the right must not change a vector",
    "the last token of a decoder carries the whole sentence",
    "multilingual models read many languages at once",
    "the dog sleeps, the fox runs, the man reads a book",
    "long texts are truncated to the maximum sequence length",
    "short ones like a or hi are a single token",
    "triton inference server runs onnx graphs on cpus and gpus",
    "sentence transformers pool token states into one embedding",
    "the bank of the river is green in spring",
    "what? no... (really) -- yes; 'single' \"double\" #hash @at $5.00",
    "2024-01-31T12:00:00Z 0x1F 1e-10 are dates and numbers",
    "emoji such as 😀 and 🚀 are rare in this corpus",
    "query: how tall is the tower? passage: it is tall.",
    "the model normalizes every embedding to unit length",
    "attention lets each token look at the others",
)


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
    _torch_seed(seed + 1)
    dense = Dense(32, 16, activation_function=torch.nn.Tanh())
    return _save_sentence_transformer(directory, bert_dir, "mean", [dense, _normalize()])


def _unigram_tokenizer():
    """A SentencePiece-style Unigram tokenizer (XLM-R's layout: <s> <pad> </s> <unk> first,
    ▁ for spaces, ``<s> text </s>``), trained on CORPUS."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=400, special_tokens=specials, unk_token="<unk>")
    tokenizer.train_from_iterator(CORPUS, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", tokenizer.token_to_id("<s>")), ("</s>", tokenizer.token_to_id("</s>"))],
    )
    return tokenizer


def xlm_roberta_model(directory: Path, seed: int = 0) -> Path:
    """XLM-RoBERTa with a Unigram tokenizer, mean pooling and Normalize (multilingual-e5-style)."""
    from transformers import XLMRobertaConfig, XLMRobertaModel, XLMRobertaTokenizerFast

    _torch_seed(seed)
    base = directory.parent / f"{directory.name}-xlmr"
    tokenizer = XLMRobertaTokenizerFast(tokenizer_object=_unigram_tokenizer())
    config = XLMRobertaConfig(
        initializer_range=INITIALIZER_RANGE,
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=37, max_position_embeddings=MAX_SEQ_LENGTH + 2, type_vocab_size=1,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    XLMRobertaModel(config, add_pooling_layer=False).eval().save_pretrained(str(base))
    tokenizer.save_pretrained(str(base))
    return _save_sentence_transformer(directory, base, "mean", [_normalize()])


def mpnet_model(directory: Path, seed: int = 0) -> Path:
    """MPNet with a WordPiece tokenizer, mean pooling and Normalize (all-mpnet-base-v2's layout)."""
    from transformers import MPNetConfig, MPNetModel, MPNetTokenizerFast

    _torch_seed(seed)
    base = directory.parent / f"{directory.name}-mpnet"
    # MPNet's vocabulary: <s> <pad> </s> <unk> first, BERT's [UNK] among the words (the
    # unknown token it actually uses), <mask> last.
    vocab = ["<s>", "<pad>", "</s>", "<unk>", "[UNK]", *WORDS, *(f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"),
             *"abcdefghijklmnopqrstuvwxyz0123456789.,?!'", "<mask>"]
    tokenizer = MPNetTokenizerFast(vocab={token: i for i, token in enumerate(dict.fromkeys(vocab))}, do_lower_case=True)
    config = MPNetConfig(
        initializer_range=INITIALIZER_RANGE,
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=37, max_position_embeddings=MAX_SEQ_LENGTH + 2, relative_attention_num_buckets=32,
        pad_token_id=tokenizer.pad_token_id,
    )
    MPNetModel(config, add_pooling_layer=False).eval().save_pretrained(str(base))
    tokenizer.save_pretrained(str(base))
    return _save_sentence_transformer(directory, base, "mean", [_normalize()])


def _byte_level_bpe(specials: list[str], vocab_size: int = 600):
    """A byte-level BPE tokenizer (GPT-2 style: every byte is a symbol) trained on CORPUS."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    return tokenizer


def modernbert_model(directory: Path, seed: int = 0) -> Path:
    """ModernBERT with a byte-level BPE tokenizer, ``[CLS] text [SEP]``, mean pooling and
    Normalize (nomic-modernbert-style). Its sliding-window layers see 24 tokens either
    side: all of a short text, not all of one of max_seq_length."""
    from tokenizers import processors
    from transformers import ModernBertConfig, ModernBertModel, PreTrainedTokenizerFast

    _torch_seed(seed)
    base = directory.parent / f"{directory.name}-modernbert"
    backend = _byte_level_bpe(["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"])
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", backend.token_to_id("[CLS]")), ("[SEP]", backend.token_to_id("[SEP]"))],
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
        mask_token="[MASK]", model_input_names=["input_ids", "attention_mask"],
    )
    config = ModernBertConfig(
        initializer_range=INITIALIZER_RANGE,
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
        intermediate_size=48, max_position_embeddings=128, global_attn_every_n_layers=3, local_attention=48,
        pad_token_id=tokenizer.pad_token_id, cls_token_id=tokenizer.cls_token_id, sep_token_id=tokenizer.sep_token_id,
        bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id,
    )
    ModernBertModel(config).eval().save_pretrained(str(base))
    tokenizer.save_pretrained(str(base))
    return _save_sentence_transformer(directory, base, "mean", [_normalize()])


def qwen3_model(directory: Path, seed: int = 0) -> Path:
    """A decoder built as Qwen3-Embedding is: a byte-level BPE tokenizer whose
    post-processor appends <|endoftext|>, left padding, last-token pooling, Normalize."""
    from tokenizers import processors
    from transformers import Qwen2TokenizerFast, Qwen3Config, Qwen3Model

    _torch_seed(seed)
    base = directory.parent / f"{directory.name}-qwen3"
    eos = "<|endoftext|>"
    backend = _byte_level_bpe([eos, "<|im_start|>", "<|im_end|>"])
    backend.post_processor = processors.TemplateProcessing(
        single=f"$A:0 {eos}:0", pair=f"$A:0 {eos}:0 $B:1 {eos}:1", special_tokens=[(eos, backend.token_to_id(eos))]
    )
    tokenizer = Qwen2TokenizerFast(
        tokenizer_object=backend, eos_token=eos, pad_token=eos, unk_token=None, padding_side="left"
    )
    config = Qwen3Config(
        initializer_range=INITIALIZER_RANGE,
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, intermediate_size=48, max_position_embeddings=128,
        tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    Qwen3Model(config).eval().save_pretrained(str(base))
    tokenizer.save_pretrained(str(base))
    return _save_sentence_transformer(directory, base, "lasttoken", [_normalize()])


def routed_model(directory: Path, seed: int = 0, default_route: str | None = "document") -> Path:
    """An asymmetric model: one Transformer and mean pooling, then a Router with a
    different Dense head for queries and for documents (``Router.for_query_document``);
    ``default_route`` None: a text must name its task."""
    transformer_dir = save_bert(directory.parent / f"{directory.name}-bert", seed=seed, initializer_range=INITIALIZER_RANGE)
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Dense, Router, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    _torch_seed(seed + 1)
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

    _torch_seed(seed)
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
    _torch_seed(seed + 1)
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
    from tokenizers import processors
    from transformers import Gemma3TextConfig, Gemma3TextModel, PreTrainedTokenizerFast

    _torch_seed(seed)
    base = directory.parent / f"{directory.name}-gemma3"
    backend = _byte_level_bpe(["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"])
    backend.post_processor = processors.TemplateProcessing(
        single="<bos> $A <eos>", pair="<bos> $A <eos> $B <eos>",
        special_tokens=[("<bos>", backend.token_to_id("<bos>")), ("<eos>", backend.token_to_id("<eos>"))],
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>",
        mask_token="<mask>",
    )
    config = Gemma3TextConfig(
        initializer_range=INITIALIZER_RANGE,
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1,
        head_dim=16, intermediate_size=48, max_position_embeddings=128, query_pre_attn_scalar=16,
        # Bidirectional: each sliding layer sees the tokens within 8 either side of a token,
        # less than a long text: the window must be kept in the graph.
        use_bidirectional_attention=True, sliding_window=16,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    Gemma3TextModel(config).eval().save_pretrained(str(base))
    tokenizer.save_pretrained(str(base))
    _torch_seed(seed + 1)
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
    """A CrossEncoder with several labels (an NLI classifier: ``id2label`` names them)."""
    from sentence_transformers import CrossEncoder

    bert_dir = save_bert(
        directory.parent / f"{directory.name}-bert", head="classification", seed=seed, num_labels=len(labels),
        id2label=dict(enumerate(labels)), label2id={label: index for index, label in enumerate(labels)},
    )
    CrossEncoder(str(bert_dir), device="cpu", max_length=MAX_SEQ_LENGTH).save(str(directory))
    return directory


def deberta_v2_cross_encoder(directory: Path, seed: int = 0, labels: tuple[str, ...] = ("LABEL_0",)) -> Path:
    """A DeBERTa-v2 cross-encoder in DeBERTa-v3's layout (relative attention both ways, no
    absolute positions, no token type embeddings: type_vocab_size 0) whose tokenizer gives
    token_type_ids all the same, as mxbai-rerank-v1's and the DeBERTa-v3 NLI
    cross-encoders' do; one label (a reranker) or several (a classifier)."""
    from sentence_transformers import CrossEncoder
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

    _torch_seed(seed)
    base = directory.parent / f"{directory.name}-deberta"
    tokenizer = bert_tokenizer(base)
    config = DebertaV2Config(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
        max_position_embeddings=128, type_vocab_size=0, relative_attention=True, position_buckets=32,
        max_relative_positions=-1, pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm", share_att_key=True,
        position_biased_input=False, initializer_range=INITIALIZER_RANGE, pad_token_id=tokenizer.pad_token_id,
        num_labels=len(labels), id2label=dict(enumerate(labels)), label2id={label: i for i, label in enumerate(labels)},
    )
    DebertaV2ForSequenceClassification(config).eval().save_pretrained(str(base))
    tokenizer.save_pretrained(str(base))
    CrossEncoder(str(base), device="cpu", max_length=MAX_SEQ_LENGTH).save(str(directory))
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
