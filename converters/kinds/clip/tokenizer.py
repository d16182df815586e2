"""OpenCLIP's tokenizer saved as data the gateway can run without torch.

Two kinds of OpenCLIP tokenizer are supported, each saved as a ``tokenizers``
``tokenizer.json`` plus what the gateway needs to replay it in the model's metadata:

- ``SimpleTokenizer`` (CLIP): the byte-pair vocabulary and merges go into a BPE model with
  the ``</w>`` end-of-word suffix behind a byte-level mapping, and the special tokens as
  added tokens, which SimpleTokenizer maps straight to their ids. The cleaning mode, the
  word-splitting pattern, the context length and the start/end ids go into ``ClipText``.
- ``HFTokenizer`` (SigLIP, SigLIP2, and the models with a BERT, RoBERTa, XLM-R, mT5 or NLLB
  text tower): the Hugging Face tokenizer's own Rust tokenizer is saved as it is, and the
  settings transformers applies around it (context length, pad id, truncation and padding
  sides), the cleaning mode, ``strip_sep_token`` and the ``clips`` mode go into
  ``HFClipText``.

Anything else (SigLipTokenizer, a random reduction mask, a tokenizer with no Rust form) is
refused with a message that says why.
"""

from __future__ import annotations

from pathlib import Path

from embedgate.contract.errors import ConversionError
from embedgate.contract.kinds.clip import AnyClipText, ClipClean, ClipsLayout, ClipText, HFClipText

TOKENIZER_FILE = "tokenizer.json"


def clip_text_spec(tokenizer, model_name: str) -> AnyClipText:
    from open_clip.tokenizer import HFTokenizer, SimpleTokenizer

    if isinstance(tokenizer, SimpleTokenizer):
        return _simple_text_spec(tokenizer, model_name)
    if isinstance(tokenizer, HFTokenizer):
        return _hf_text_spec(tokenizer, model_name)
    raise ConversionError(
        f"unsupported model: {model_name} uses {type(tokenizer).__name__}; only models with OpenCLIP's "
        "SimpleTokenizer (the CLIP byte-pair tokenizer) or HFTokenizer (a Hugging Face tokenizer) are supported"
    )


def save_clip_tokenizer(tokenizer, directory: Path) -> Path:
    from open_clip.tokenizer import HFTokenizer

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / TOKENIZER_FILE
    backend = _hf_backend(tokenizer) if isinstance(tokenizer, HFTokenizer) else _simple_backend(tokenizer)
    backend.save(str(path))
    return path


def _clean_mode(tokenizer, model_name: str) -> ClipClean:
    from open_clip.tokenizer import get_clean_fn

    clean = next(
        (name for name in ("lower", "whitespace", "canonicalize") if get_clean_fn(name) is tokenizer.clean_fn),
        None,
    )
    if clean is None:
        raise ConversionError(f"unsupported model: {model_name} uses an unknown text cleaning function")
    return clean


def _simple_text_spec(tokenizer, model_name: str) -> ClipText:
    if tokenizer.reduction_fn is not None:
        raise ConversionError(f"unsupported model: {model_name} tokenizes with a random reduction mask")
    return ClipText(
        context_length=int(tokenizer.context_length),
        sot_token_id=int(tokenizer.sot_token_id),
        eot_token_id=int(tokenizer.eot_token_id),
        clean=_clean_mode(tokenizer, model_name),
        word_pattern=tokenizer.pat.pattern,
    )


def _simple_backend(tokenizer):
    from tokenizers import Tokenizer, models, pre_tokenizers

    merges = sorted(tokenizer.bpe_ranks, key=tokenizer.bpe_ranks.get)
    backend = Tokenizer(
        models.BPE(vocab=dict(tokenizer.encoder), merges=merges, end_of_word_suffix="</w>", fuse_unk=False)
    )
    # Words arrive already split (the gateway applies SimpleTokenizer's pattern); only the
    # byte-to-unicode mapping is left, as SimpleTokenizer's byte_encoder does it.
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.add_special_tokens([tokenizer.decoder[token_id] for token_id in tokenizer.all_special_ids])
    return backend


def _hf_text_spec(tokenizer, model_name: str) -> HFClipText:
    hf = tokenizer.tokenizer
    _require_rust_tokenizer(hf, model_name)
    if tokenizer.tokenizer_mode not in ("", "clips"):
        raise ConversionError(f"unsupported model: {model_name} uses tokenizer_mode {tokenizer.tokenizer_mode!r}")
    if not tokenizer.context_length:
        raise ConversionError(f"unsupported model: {model_name} has no context length")
    # Without a pad token transformers refuses to pad to the context length, so OpenCLIP
    # cannot tokenize for the model either.
    if hf.pad_token_id is None:
        raise ConversionError(f"unsupported model: {model_name}'s Hugging Face tokenizer has no pad token")
    clips = None
    if tokenizer.tokenizer_mode == "clips":
        special = {"bos": hf.bos_token_id, "eos": hf.eos_token_id, "cls": hf.cls_token_id}
        missing = [name for name, token_id in special.items() if token_id is None]
        if missing:
            raise ConversionError(
                f"unsupported model: {model_name} tokenizes in the 'clips' mode, which needs the tokenizer's "
                f"{', '.join(missing)} token, and its Hugging Face tokenizer has none"
            )
        clips = ClipsLayout(bos_token_id=hf.bos_token_id, eos_token_id=hf.eos_token_id, cls_token_id=hf.cls_token_id)
    elif tokenizer.strip_sep_token and hf.sep_token_id is None:
        # OpenCLIP fails on every text then (it compares the ids with None).
        raise ConversionError(
            f"unsupported model: {model_name} sets strip_sep_token, and its Hugging Face tokenizer has no sep token"
        )
    return HFClipText(
        context_length=int(tokenizer.context_length),
        clean=_clean_mode(tokenizer, model_name),
        pad_token_id=int(hf.pad_token_id),
        truncation_side=hf.truncation_side,
        padding_side=hf.padding_side,
        split_special_tokens=bool(hf.split_special_tokens),
        # The clips mode never strips the separator.
        strip_sep_token_id=int(hf.sep_token_id) if tokenizer.strip_sep_token and clips is None else None,
        clips=clips,
    )


def _require_rust_tokenizer(hf, model_name: str) -> None:
    from tokenizers import Tokenizer

    if not isinstance(getattr(hf, "backend_tokenizer", None), Tokenizer):
        raise ConversionError(
            f"unsupported model: {model_name}'s Hugging Face tokenizer ({type(hf).__name__}) has no tokenizers "
            "(Rust) form, which the gateway runs"
        )


def _hf_backend(tokenizer):
    from tokenizers import Tokenizer

    # A copy of the Rust tokenizer as transformers configured it once loaded (its special
    # tokens and post-processor included), without the truncation and padding the last
    # call left on it: the gateway sets those from the metadata.
    backend = Tokenizer.from_str(tokenizer.tokenizer.backend_tokenizer.to_str())
    backend.no_truncation()
    backend.no_padding()
    return backend
