"""The chunked-documents benchmark's documents: about the tokens asked for (MiniLM's
tokenizer), each its own, the same for the same seed."""

from __future__ import annotations

from pathlib import Path

from embedgate.bench.chunked_documents import documents
from embedgate.contract.preprocess.text import TextTokenizer


def test_documents_have_about_the_tokens_asked_and_none_repeats(minilm_path):
    tokenizer = TextTokenizer(Path(minilm_path) / "tokenizer.json", 256).whole()
    texts = documents(4, 2000, seed=7)
    counts = [len(tokenizer.encode(text, add_special_tokens=False).ids) for text in texts]

    assert all(2000 <= count <= 2040 for count in counts), counts
    assert len(set(texts)) == 4 and documents(4, 2000, seed=7) == texts
    assert not set(texts) & set(documents(4, 2000, seed=8))
