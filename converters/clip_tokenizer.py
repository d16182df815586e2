"""OpenCLIP's SimpleTokenizer saved as data the gateway can run without torch.

The byte-pair vocabulary and merges go into a ``tokenizers`` ``tokenizer.json`` (a BPE
model with the ``</w>`` end-of-word suffix behind a byte-level mapping, and the special
tokens as added tokens, which SimpleTokenizer maps straight to their ids). The cleaning
mode, the word-splitting pattern, the context length and the start/end ids go into the
model's metadata (``ClipText``). Only SimpleTokenizer models are supported: others
(Hugging Face tokenizers, SigLIP) are refused with a clear message.
"""

from __future__ import annotations

from pathlib import Path

from embedgate.converters.errors import ConversionError
from embedgate.converters.spec import ClipText

TOKENIZER_FILE = "tokenizer.json"


def clip_text_spec(tokenizer, model_name: str) -> ClipText:
    from open_clip.tokenizer import SimpleTokenizer, get_clean_fn

    if not isinstance(tokenizer, SimpleTokenizer):
        raise ConversionError(
            f"unsupported model: {model_name} uses {type(tokenizer).__name__}; only models with "
            "OpenCLIP's SimpleTokenizer (the CLIP byte-pair tokenizer) are supported"
        )
    if tokenizer.reduction_fn is not None:
        raise ConversionError(f"unsupported model: {model_name} tokenizes with a random reduction mask")
    clean = next(
        (name for name in ("lower", "whitespace", "canonicalize") if get_clean_fn(name) is tokenizer.clean_fn),
        None,
    )
    if clean is None:
        raise ConversionError(f"unsupported model: {model_name} uses an unknown text cleaning function")
    return ClipText(
        context_length=int(tokenizer.context_length),
        sot_token_id=int(tokenizer.sot_token_id),
        eot_token_id=int(tokenizer.eot_token_id),
        clean=clean,
        word_pattern=tokenizer.pat.pattern,
    )


def save_clip_tokenizer(tokenizer, directory: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers

    merges = sorted(tokenizer.bpe_ranks, key=tokenizer.bpe_ranks.get)
    backend = Tokenizer(
        models.BPE(vocab=dict(tokenizer.encoder), merges=merges, end_of_word_suffix="</w>", fuse_unk=False)
    )
    # Words arrive already split (the gateway applies SimpleTokenizer's pattern); only the
    # byte-to-unicode mapping is left, as SimpleTokenizer's byte_encoder does it.
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.add_special_tokens([tokenizer.decoder[token_id] for token_id in tokenizer.all_special_ids])
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / TOKENIZER_FILE
    backend.save(str(path))
    return path
