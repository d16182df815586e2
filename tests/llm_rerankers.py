"""Tiny LLM rerankers with random weights, built at test time (no hub), laid out as
Qwen3-Reranker is for sentence-transformers 6: a Qwen3 causal LM whose byte-level BPE
tokenizer has "yes" and "no" tokens and a chat template that renders a "query" and a
"document" message (and a "system" one, the prompt, as the instruction) into the judging
prompt, ending in the assistant's turn; loaded as a ``CrossEncoder`` it is a
``Transformer`` (text-generation) then ``LogitScore`` (logit("yes") - logit("no") at the
last token). Its sequence-classification form is the same LM with a one-label head whose
row is the "yes" row less the "no" row of the LM's head, as the converted
Qwen3-Reranker-seq-cls models are made."""

from __future__ import annotations

from pathlib import Path

from tests import tiny_models

# Short, so that the tests' pairs fit in MAX_SEQ_LENGTH and the parity's long one does not.
CHAT_TEMPLATE = (
    '{%- set instruction = messages | selectattr("role", "eq", "system") | map(attribute="content") | first'
    ' | default("Find the document that answers the query") -%}\n'
    '{%- set query = messages | selectattr("role", "eq", "query") | map(attribute="content") | first -%}\n'
    '{%- set document = messages | selectattr("role", "eq", "document") | map(attribute="content") | first -%}\n'
    "<|im_start|>system\nAnswer yes or no.<|im_end|>\n"
    "<|im_start|>user\n<Instruct>: {{ instruction }}\n<Query>: {{ query }}\n<Document>: {{ document }}<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n\n</think>\n\n"
)
MAX_SEQ_LENGTH = 160
PROMPTS = {"web": "Given a web search query, find the passages that answer it"}
# <|endoftext|>, the padding, is not id 0: the gateway pads with 0, so a graph that told
# padding by its id without the tokenizer's would score padding.
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
PAD = SPECIALS[2]


def chat_tokenizer(chat_template: str | None = CHAT_TEMPLATE):
    """A Qwen2 tokenizer (byte-level BPE trained on the tests' corpus, "yes" and "no" among
    its tokens, padding with <|endoftext|>) with ``chat_template``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Qwen2TokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    # Lines of their own: "yes" and "no" become whole tokens (Qwen's vocabulary has both).
    backend.train_from_iterator([*tiny_models.CORPUS, *["yes", "no"] * 20], trainer)
    tokenizer = Qwen2TokenizerFast(
        tokenizer_object=backend, eos_token=PAD, pad_token=PAD, unk_token=None
    )
    assert tokenizer.convert_tokens_to_ids("yes") is not None and tokenizer.convert_tokens_to_ids("no") is not None
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    return tokenizer


def _causal_lm(tokenizer, seed: int):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tiny_models.torch_seed(seed)
    config = Qwen3Config(
        initializer_range=tiny_models.INITIALIZER_RANGE,
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, intermediate_size=48, max_position_embeddings=512,
        tie_word_embeddings=False, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    return Qwen3ForCausalLM(config).eval()


def _save_cross_encoder(directory: Path, base: Path, **options) -> Path:
    from sentence_transformers import CrossEncoder

    CrossEncoder(str(base), device="cpu", **{"max_length": MAX_SEQ_LENGTH, **options}).save(str(directory))
    return directory


def causal_reranker(directory: Path, seed: int = 0, chat_template: str | None = CHAT_TEMPLATE, **options) -> Path:
    """A causal LM reranker: Transformer (text-generation) -> LogitScore("yes", "no");
    without ``chat_template``, its pairs are tokenized as text pairs. ``options`` go to
    ``CrossEncoder`` (``prompts``...)."""
    base = directory.parent / f"{directory.name}-lm"
    tokenizer = chat_tokenizer(chat_template)
    _causal_lm(tokenizer, seed).save_pretrained(str(base))
    tokenizer.save_pretrained(str(base))
    return _save_cross_encoder(directory, base, **options)


def sequence_classification_reranker(directory: Path, seed: int = 0) -> Path:
    """The same reranker converted to a sequence-classification model: one label, its head's
    row the LM head's "yes" row less its "no" row (so its logit is logit("yes") - logit("no")
    at the last token that is not padding)."""
    import torch
    from transformers import Qwen3ForSequenceClassification

    base = directory.parent / f"{directory.name}-seq-cls"
    tokenizer = chat_tokenizer()
    causal = _causal_lm(tokenizer, seed)
    config = causal.config
    config.num_labels = 1
    config.architectures = ["Qwen3ForSequenceClassification"]
    classifier = Qwen3ForSequenceClassification(config).eval()
    classifier.model.load_state_dict(causal.model.state_dict())
    yes, no = tokenizer.convert_tokens_to_ids("yes"), tokenizer.convert_tokens_to_ids("no")
    with torch.no_grad():
        classifier.score.weight.copy_((causal.lm_head.weight[yes] - causal.lm_head.weight[no]).unsqueeze(0))
    classifier.save_pretrained(str(base))
    tokenizer.save_pretrained(str(base))
    return _save_cross_encoder(directory, base)
