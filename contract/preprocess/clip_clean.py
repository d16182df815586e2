"""OpenCLIP's text cleaning (``open_clip.tokenizer.get_clean_fn``), applied before any CLIP
tokenizer, SimpleTokenizer's and Hugging Face's alike."""

from __future__ import annotations

import html
import string
from collections.abc import Callable

import ftfy

_PUNCTUATION = str.maketrans("", "", string.punctuation)


def _basic_clean(text: str) -> str:
    return html.unescape(html.unescape(ftfy.fix_text(text))).strip()


def _whitespace_clean(text: str) -> str:
    return " ".join(text.split()).strip()


def _canonicalize(text: str) -> str:
    text = text.replace("_", " ").translate(_PUNCTUATION).lower()
    return " ".join(text.split()).strip()


CLEANERS: dict[str, Callable[[str], str]] = {
    "lower": lambda text: _whitespace_clean(_basic_clean(text)).lower(),
    "whitespace": lambda text: _whitespace_clean(_basic_clean(text)),
    "canonicalize": lambda text: _canonicalize(_basic_clean(text)),
}
