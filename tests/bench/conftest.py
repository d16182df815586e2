"""The MiniLM tokenizer, to check what the generated payloads cost in tokens."""

from pathlib import Path

import pytest

from embedgate.contract.preprocess.text import TextTokenizer


@pytest.fixture(scope="session")
def minilm_tokenizer(minilm_path) -> TextTokenizer:
    return TextTokenizer(Path(minilm_path) / "tokenizer.json", 256)
