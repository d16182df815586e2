"""Tiny transformers of the architectures people serve (hidden 32, 2 or 3 layers), each with
the head asked for: the bare model (an embedder's body), a sequence-classification head (a
reranker or classifier) or a masked-LM head (SPLADE's), saved with a tokenizer of the
architecture's own layout. tests/tiny_models.py builds sentence-transformers models on them.

Every builder takes ``(directory, head="base", seed=0, **config)``; ``config`` goes to the
architecture's config (``num_labels``, ``id2label``...). A builder's weights depend on its
seed alone: the same seed gives the same transformer.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

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

# A head -> the suffix of transformers' class for it ("" for the bare model).
HEADS = {"base": "Model", "classification": "ForSequenceClassification", "masked_lm": "ForMaskedLM"}

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


def save_bert(directory: Path, head: str = "base", seed: int = 0, **config) -> Path:
    """A tiny BERT (``head``: base, sequence classification or masked LM) and its tokenizer."""
    torch_seed(seed)
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


def torch_seed(seed: int) -> None:
    import torch

    torch.manual_seed(seed)


def _model(architecture: str, head: str, config):
    """transformers' ``<architecture><head>`` of ``config``, in eval mode."""
    import transformers

    model_class = getattr(transformers, architecture + HEADS[head])
    # An embedder's body has no pooler (the sentence-transformers Pooling is its pooling).
    extra = {"add_pooling_layer": False} if head == "base" and architecture in ("XLMRoberta", "MPNet") else {}
    return model_class(config, **extra).eval()


def _save(directory: Path, model, tokenizer) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory


def unigram_tokenizer():
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


def byte_level_bpe(specials: list[str], vocab_size: int = 600):
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


def framed_bpe(specials: list[str], start: str, end: str):
    """A byte-level BPE tokenizer over ``specials`` whose texts are ``start text end`` (a pair
    ``start a end b end``)."""
    from tokenizers import processors

    backend = byte_level_bpe(specials)
    backend.post_processor = processors.TemplateProcessing(
        single=f"{start} $A {end}", pair=f"{start} $A {end} $B {end}",
        special_tokens=[(start, backend.token_to_id(start)), (end, backend.token_to_id(end))],
    )
    return backend


def xlm_roberta(directory: Path, head: str = "base", seed: int = 0, **config) -> Path:
    """XLM-RoBERTa with a Unigram tokenizer (multilingual-e5's and bge-reranker's layout)."""
    from transformers import XLMRobertaConfig, XLMRobertaTokenizerFast

    torch_seed(seed)
    tokenizer = XLMRobertaTokenizerFast(tokenizer_object=unigram_tokenizer())
    settings = XLMRobertaConfig(
        initializer_range=INITIALIZER_RANGE,
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=37, max_position_embeddings=MAX_SEQ_LENGTH + 2, type_vocab_size=1,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        **config,
    )
    return _save(directory, _model("XLMRoberta", head, settings), tokenizer)


def mpnet(directory: Path, head: str = "base", seed: int = 0, **config) -> Path:
    """MPNet with a WordPiece tokenizer (all-mpnet-base-v2's layout)."""
    from transformers import MPNetConfig, MPNetTokenizerFast


    torch_seed(seed)
    # MPNet's vocabulary: <s> <pad> </s> <unk> first, BERT's [UNK] among the words (the
    # unknown token it actually uses), <mask> last.
    vocab = ["<s>", "<pad>", "</s>", "<unk>", "[UNK]", *WORDS, *(f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"),
             *"abcdefghijklmnopqrstuvwxyz0123456789.,?!'", "<mask>"]
    tokenizer = MPNetTokenizerFast(vocab={token: i for i, token in enumerate(dict.fromkeys(vocab))}, do_lower_case=True)
    settings = MPNetConfig(
        initializer_range=INITIALIZER_RANGE,
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=37, max_position_embeddings=MAX_SEQ_LENGTH + 2, relative_attention_num_buckets=32,
        pad_token_id=tokenizer.pad_token_id, **config,
    )
    return _save(directory, _model("MPNet", head, settings), tokenizer)


def modernbert(directory: Path, head: str = "base", seed: int = 0, **config) -> Path:
    """ModernBERT with a byte-level BPE tokenizer and ``[CLS] text [SEP]``. Its sliding-window
    layers see 24 tokens either side: all of a short text, not all of one of max_seq_length."""
    from transformers import ModernBertConfig, PreTrainedTokenizerFast

    torch_seed(seed)
    backend = framed_bpe(["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"], "[CLS]", "[SEP]")
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
        mask_token="[MASK]", model_input_names=["input_ids", "attention_mask"],
    )
    settings = ModernBertConfig(
        initializer_range=INITIALIZER_RANGE,
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
        intermediate_size=48, max_position_embeddings=128, global_attn_every_n_layers=3, local_attention=48,
        pad_token_id=tokenizer.pad_token_id, cls_token_id=tokenizer.cls_token_id, sep_token_id=tokenizer.sep_token_id,
        bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id, **config,
    )
    return _save(directory, _model("ModernBert", head, settings), tokenizer)


def qwen3(directory: Path, head: str = "base", seed: int = 0, **config) -> Path:
    """A Qwen3 decoder as Qwen3-Embedding's: a byte-level BPE tokenizer whose post-processor
    appends <|endoftext|>, left padding."""
    from tokenizers import processors
    from transformers import Qwen2TokenizerFast, Qwen3Config

    torch_seed(seed)
    eos = "<|endoftext|>"
    backend = byte_level_bpe([eos, "<|im_start|>", "<|im_end|>"])
    backend.post_processor = processors.TemplateProcessing(
        single=f"$A:0 {eos}:0", pair=f"$A:0 {eos}:0 $B:1 {eos}:1", special_tokens=[(eos, backend.token_to_id(eos))]
    )
    tokenizer = Qwen2TokenizerFast(
        tokenizer_object=backend, eos_token=eos, pad_token=eos, unk_token=None, padding_side="left"
    )
    settings = Qwen3Config(
        initializer_range=INITIALIZER_RANGE,
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, intermediate_size=48, max_position_embeddings=128,
        tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **config,
    )
    return _save(directory, _model("Qwen3", head, settings), tokenizer)


def gemma3(directory: Path, head: str = "base", seed: int = 0, **config) -> Path:
    """A Gemma 3 text model with bidirectional attention, as EmbeddingGemma's (sliding-window
    layers and a global one), ``<bos> text <eos>``."""
    from transformers import Gemma3TextConfig, PreTrainedTokenizerFast

    torch_seed(seed)
    backend = framed_bpe(["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"], "<bos>", "<eos>")
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>",
        mask_token="<mask>",
    )
    settings = Gemma3TextConfig(
        initializer_range=INITIALIZER_RANGE,
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1,
        head_dim=16, intermediate_size=48, max_position_embeddings=128, query_pre_attn_scalar=16,
        # Bidirectional: each sliding layer sees the tokens within 8 either side of a token,
        # less than a long text: the window must be kept in the graph.
        use_bidirectional_attention=True, sliding_window=16,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        **config,
    )
    return _save(directory, _model("Gemma3Text", head, settings), tokenizer)


def deberta_v2(directory: Path, head: str = "base", seed: int = 0, **config) -> Path:
    """DeBERTa-v2 in DeBERTa-v3's layout (relative attention both ways, no absolute positions,
    no token type embeddings: type_vocab_size 0) whose tokenizer gives token_type_ids all the
    same, as mxbai-rerank-v1's and the DeBERTa-v3 NLI cross-encoders' do."""
    from transformers import DebertaV2Config


    torch_seed(seed)
    tokenizer = bert_tokenizer(directory)
    settings = DebertaV2Config(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
        max_position_embeddings=128, type_vocab_size=0, relative_attention=True, position_buckets=32,
        max_relative_positions=-1, pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm", share_att_key=True,
        position_biased_input=False, initializer_range=INITIALIZER_RANGE, pad_token_id=tokenizer.pad_token_id,
        **config,
    )
    return _save(directory, _model("DebertaV2", head, settings), tokenizer)


def bert(directory: Path, head: str = "base", seed: int = 0, **config) -> Path:
    """BERT with a WordPiece tokenizer over WORDS (drawn wide, as the others)."""
    return save_bert(directory, head=head, seed=seed, **{"initializer_range": INITIALIZER_RANGE, **config})


Builder = Callable[..., Path]
# name -> builder, for every architecture the dense tests build.
TRANSFORMERS: dict[str, Builder] = {
    "bert": bert, "xlm-roberta": xlm_roberta, "mpnet": mpnet, "modernbert": modernbert, "qwen3": qwen3,
    "gemma3": gemma3, "deberta-v2": deberta_v2,
}
# Those with a masked-LM head (the decoders have none).
MASKED_LM = ("bert", "xlm-roberta", "mpnet", "modernbert", "deberta-v2")
