"""Texts cut into chunks of the model's own tokens (MiniLM's tokenizer.json, and a byte-level
BPE one): no chunk over max_tokens once it stands alone, every token of the text in a chunk,
the asked overlap, the boundaries asked for, in several scripts; the refusals."""

from __future__ import annotations

import pytest

from embedgate.api.compute.requests.chunking import Chunking, chunk_texts
from embedgate.api.errors import InvalidOption, TooManyInputs
from embedgate.contract.preprocess.text import TextTokenizer

DOCUMENT = (
    "The quick brown fox jumps over the lazy dog. Embedding servers batch requests! "
    "東京は日本の首都です。大阪も大きい都市です。 Emoji 🎉🎉 party time? "
    "Unbelievably, antidisestablishmentarianism stays a very long word. "
    "Ein Straßenbahnfahrer fährt über die Brücke; c'est la vie, n'est-ce pas? "
) * 3


@pytest.fixture(scope="module")
def minilm_tokenizer(minilm_path):
    return TextTokenizer(f"{minilm_path}/tokenizer.json", 128)


@pytest.fixture(scope="module")
def bpe_tokenizer(tmp_path_factory):
    from tests import llm_rerankers

    directory = tmp_path_factory.mktemp("bpe")
    llm_rerankers.chat_tokenizer(None).save_pretrained(str(directory))
    return TextTokenizer(directory / "tokenizer.json", 128)


def alone(tokenizer, text: str) -> int:
    return len(tokenizer.whole().encode(text, add_special_tokens=False).ids)


def token_spans(tokenizer, text: str) -> list[tuple[int, int]]:
    """Each token's characters, without the whitespace a byte-level BPE's token begins with."""
    spans = tokenizer.whole().encode(text, add_special_tokens=False).offsets
    return [(stop - len(text[start:stop].lstrip()), stop) for start, stop in spans if text[start:stop].strip()]


@pytest.mark.parametrize("which", ["minilm_tokenizer", "bpe_tokenizer"])
@pytest.mark.parametrize("boundary", ["token", "whitespace", "sentence"])
@pytest.mark.parametrize(("max_tokens", "overlap"), [(16, 0), (16, 4), (7, 3), (40, 10)])
def test_chunks_hold_every_token_none_over_the_limit_with_the_overlap(request, which, boundary, max_tokens, overlap):
    tokenizer = request.getfixturevalue(which)
    (chunks,) = chunk_texts(tokenizer, [DOCUMENT], Chunking(max_tokens, overlap, boundary), "", 128, 10_000)

    assert len(chunks) > 1
    for chunk in chunks:
        assert 0 < chunk.tokens <= max_tokens
        assert chunk.tokens == alone(tokenizer, DOCUMENT[chunk.start : chunk.end])
    # Every token of the text is in a chunk; chunks go forward, each ending past the one before.
    spans = token_spans(tokenizer, DOCUMENT)
    assert all(any(c.start <= start and stop <= c.end for c in chunks) for start, stop in spans)
    assert all(b.start > a.start and b.end > a.end for a, b in zip(chunks, chunks[1:]))
    assert chunks[0].start == spans[0][0] and chunks[-1].end == spans[-1][1]
    if boundary == "token":
        # Each chunk starts `overlap` tokens before the one before it ended (the tokens the
        # two share, counted in the text's own tokens); a byte-level BPE's chunk moves to the
        # nearest whole character (an emoji is four tokens of one character).
        slack = 0 if which == "minilm_tokenizer" else 3
        for a, b in zip(chunks, chunks[1:]):
            shared = sum(1 for start, stop in spans if b.start <= start and stop <= a.end)
            assert abs(shared - overlap) <= slack
    else:
        # A chunk in Latin script ends at a word's end (but inside a word longer than the window).
        latin = [c for c in chunks if DOCUMENT[c.end - 1].isascii()]
        ends = [c.end == len(DOCUMENT.rstrip()) or DOCUMENT[c.end].isspace() for c in latin]
        assert sum(ends) >= len(ends) / 2  # (MiniLM: 75-100%; the small BPE splits words more)


def test_whitespace_and_sentence_chunks_end_at_words_and_sentences(minilm_tokenizer):
    text = "One two three four five. Six seven eight nine ten. Eleven twelve thirteen fourteen fifteen."
    (words,) = chunk_texts(minilm_tokenizer, [text], Chunking(8, 3, "whitespace"), "", 128, 100)
    (sentences,) = chunk_texts(minilm_tokenizer, [text], Chunking(8, 0, "sentence"), "", 128, 100)
    (overlapping,) = chunk_texts(minilm_tokenizer, [text], Chunking(8, 2, "sentence"), "", 128, 100)

    assert [text[c.start : c.end] for c in sentences] == [
        "One two three four five.", "Six seven eight nine ten.", "Eleven twelve thirteen fourteen fifteen."
    ]
    # Whole words, each chunk starting in the one before it (three tokens back: at a word).
    assert all(c.end == len(text) or text[c.end] == " " for c in words)
    assert all(c.start == 0 or text[c.start - 1] == " " for c in words)
    assert all(b.start < a.end for a, b in zip(words, words[1:]))
    # Sentences, each chunk beginning with the last two tokens of the one before.
    assert [text[c.start : c.end] for c in overlapping] == [
        "One two three four five.", "five. Six seven eight nine ten.", "ten. Eleven twelve thirteen fourteen fifteen."
    ]


def test_a_text_within_one_chunk_is_one_chunk_and_an_empty_one_too(minilm_tokenizer):
    chunks = chunk_texts(minilm_tokenizer, ["  a short text  ", "", "   "], Chunking(16), "", 128, 100)

    assert [[(c.start, c.end) for c in mine] for mine in chunks] == [[(2, 14)], [(0, 0)], [(0, 3)]]


def test_max_tokens_past_the_models_window_is_refused_saying_how_many_fit(minilm_tokenizer):
    # 16 tokens of max length: 2 special tokens, and "query: " is 2 more.
    with pytest.raises(InvalidOption, match="holds at most 12 tokens") as refused:
        chunk_texts(minilm_tokenizer, [DOCUMENT], Chunking(13), "query: ", 16, 100)
    assert refused.value.param == "chunking"
    assert chunk_texts(minilm_tokenizer, ["a b c"], Chunking(12), "query: ", 16, 100)


def test_more_chunks_than_the_limit_are_refused_without_cutting_past_it(minilm_tokenizer, monkeypatch):
    with pytest.raises(TooManyInputs, match="more than 5 chunks"):
        chunk_texts(minilm_tokenizer, [DOCUMENT], Chunking(8), "", 128, 5)
    with pytest.raises(TooManyInputs, match="more than 5 chunks"):
        chunk_texts(minilm_tokenizer, ["a b c", "d e f", DOCUMENT], Chunking(8), "", 128, 5)
    assert len(chunk_texts(minilm_tokenizer, ["a b c"] * 5, Chunking(8), "", 128, 5)) == 5
    # A huge text in one-token chunks: refused after the limit's chunks are cut, not all of them.
    counted = []
    whole = minilm_tokenizer.whole()
    original = whole.encode

    def encode(text, **options):
        counted.append(text)
        return original(text, **options)

    monkeypatch.setattr(minilm_tokenizer, "whole", lambda: type("W", (), {"encode": staticmethod(encode)})())
    with pytest.raises(TooManyInputs):
        chunk_texts(minilm_tokenizer, ["word " * 100_000], Chunking(1), "", 128, 1024)
    assert len(counted) < 1100


def test_chunks_smaller_than_a_character_takes_are_refused(bpe_tokenizer):
    """A byte-level BPE gives a character it never saw several byte tokens, and a chunk never
    splits a character."""
    text = "party 🦜 time"
    takes = alone(bpe_tokenizer, "🦜")
    assert takes >= 2
    with pytest.raises(InvalidOption, match=f"alone takes {takes} tokens"):
        chunk_texts(bpe_tokenizer, [text], Chunking(takes - 1), "", 128, 100)
    (chunks,) = chunk_texts(bpe_tokenizer, [text], Chunking(takes), "", 128, 100)
    assert all(chunk.tokens <= takes for chunk in chunks) and any(text[c.start : c.end] == "🦜" for c in chunks)
