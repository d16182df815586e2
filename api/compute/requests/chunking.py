"""Long texts cut into chunks of the model's own tokens, each embedded as an input of its own.

A request that asks for chunks (``max_tokens``, ``overlap``, ``boundary``) has each of its
texts tokenized in full, without its prompt and special tokens, by the tokenizer of the
route it takes; the tokens are cut into windows of at most ``max_tokens``, each starting
``overlap`` tokens before the previous one ended, and each window is the text between its
first token's first character and its last token's last one (its characters in the
input: ``start``, ``end``). With ``boundary`` "whitespace" a window ends at the last gap
between words that fits in it, and "sentence" at the last sentence end (falling back to a
gap, then to any token); the next starts at a word. A chunk's text is then embedded as any
input is (its prompt before it, its route, the request's options), so its vector is what
``SentenceTransformer.encode`` gives for that text.

A window cut inside a word may tokenize otherwise once it stands alone (a WordPiece
continuation becomes a word start); every chunk's text is tokenized again, and one over
``max_tokens`` is cut shorter until it fits, so no chunk is ever over. ``max_tokens`` is
refused where a chunk of that many tokens, its prompt and its special tokens would not fit
the model's max length (the model would cut it: its tail lost).

The work runs in the tokenizer pool, off the event loop.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Literal

from embedgate.contract.preprocess.prompted import PromptedText

from ...errors import InvalidOption, TooManyInputs

Boundary = Literal["token", "whitespace", "sentence"]
# What ends a sentence: a text's last character before a gap (or the text's end), or a
# full-width stop, which needs no gap after it.
SENTENCE_ENDS = frozenset(".!?…")
FULL_WIDTH_ENDS = frozenset("。！？")


@dataclass(frozen=True)
class Chunking:
    """A request's chunks: at most ``max_tokens`` tokens each, ``overlap`` tokens shared
    with the one before, cut at ``boundary``; ``late``: pooled from the whole text's token
    vectors (``late_chunking.py``) instead of each embedded alone."""

    max_tokens: int
    overlap: int = 0
    boundary: Boundary = "token"
    late: bool = False


@dataclass(frozen=True)
class Chunk:
    """A chunk of an input: its characters ``[start, end)`` and its tokens (the model's,
    without prompt and special tokens)."""

    start: int
    end: int
    tokens: int


def chunk_texts(
    tokenizer, texts: list[str], chunking: Chunking, prefix: str, max_length: int, max_chunks: int
) -> list[list[Chunk]]:
    """Each text's chunks, in order (``tokenizer``: the route's ``TextTokenizer``; ``prefix``:
    the prompt every chunk gets). Refuses ``max_tokens`` past what fits the model, and more
    than ``max_chunks`` chunks in all."""
    whole = tokenizer.whole()
    check_fits(whole, chunking, prefix, max_length)
    strip = tokenizer.strip_whitespace
    chunks: list[list[Chunk]] = []
    for text in texts:
        kept = text.strip() if strip else text
        lead = len(text) - len(text.lstrip()) if strip else 0
        spans = [(start + lead, stop + lead) for start, stop in whole.encode(kept, add_special_tokens=False).offsets]
        mine = cut(text, [spans[index] for index in worded(spans, text)], chunking,
                   lambda first, last, part: len(whole.encode(part.strip() if strip else part, add_special_tokens=False).ids),
                   max_chunks - sum(map(len, chunks)))
        chunks.append([chunk for _, _, chunk in too_many(mine, max_chunks)])
    return chunks


def check_fits(whole, chunking: Chunking, prefix: str, max_length: int) -> int:
    """The most tokens a chunk of this model holds beside its prompt and special tokens
    (``whole``: the route's tokenizer without truncation); ``max_tokens`` past it is refused."""
    fits = max_length - len(whole.encode("", add_special_tokens=True).ids)
    fits -= len(whole.encode(prefix, add_special_tokens=False).ids) if prefix else 0
    if chunking.max_tokens > fits:
        raise InvalidOption(
            f"chunking.max_tokens is {chunking.max_tokens}, but a chunk of this model holds at most {fits} tokens "
            f"(its max length {max_length}, less its special tokens"
            + (" and the prompt's)" if prefix else ")"),
            "chunking",
        )
    return fits


def worded(spans: list[tuple[int, int]], text: str) -> list[int]:
    """The tokens (their indices in ``spans``, characters of ``text``) that may begin or end
    a chunk: not those of whitespace alone (a byte-level BPE's)."""
    return [index for index, (start, stop) in enumerate(spans) if text[start:stop].strip()]


def too_many(chunks: list | None, max_chunks: int) -> list:
    """``chunks``; None (past the request's limit) refused."""
    if chunks is None:
        raise TooManyInputs(
            f"the texts make more than {max_chunks} chunks in one request (EMBEDGATE_MAX_CHUNKS_PER_REQUEST); "
            "send fewer texts, or ask for larger chunks"
        )
    return chunks


def cut(text: str, spans: list[tuple[int, int]], chunking: Chunking, count, most: int) -> list[tuple[int, int, Chunk]] | None:
    """``text``'s chunks from the character ``spans`` of its tokens that may begin or end
    one (``worded``), each with its first token and one past its last (indices in
    ``spans``); ``count(first, last, part)``: the tokens of the chunk of those that is
    ``part``. None past ``most`` chunks (cut no further: a huge text in tiny chunks is
    refused at the limit's cost, not at its own)."""
    if not spans:
        return [(0, 0, Chunk(0, len(text), count(0, 0, text)))] if most >= 1 else None
    limit, overlap = chunking.max_tokens, chunking.overlap
    # Where a chunk may begin or end: not inside a character (a byte-level BPE gives each
    # byte of an emoji a token over the whole character). A word begins after a gap or
    # with a token that begins with whitespace (a byte-level BPE's "Ġword").
    cuts = [0] + [i for i in range(1, len(spans)) if spans[i][0] >= spans[i - 1][1]]
    words = [i for i in cuts if _starts_word(text, spans, i)]
    chunks = []
    first = ended = 0
    while True:
        last = min(first + limit, len(spans))  # one past the window's last token
        if last < len(spans):
            # Every chunk ends past the one before it: a boundary is no reason to repeat it.
            last = _boundary(text, spans, max(first, ended), last, chunking.boundary, words, cuts)
        part = _text(text, spans, first, last)
        tokens = count(first, last, part)
        while tokens > limit and last - first > 1:
            # Alone it tokenizes into more: shorter, still ending past the chunk before (else
            # starting later: less overlap).
            shorter = _at_or_before(cuts, max(first + 1, ended + 1, last - (tokens - limit)), max(first, ended))
            if shorter < last:
                last = shorter
            else:
                first = cuts[bisect_right(cuts, first)] if bisect_right(cuts, first) < len(cuts) else first + 1
            part = _text(text, spans, first, last)
            tokens = count(first, last, part)
        if tokens > limit:  # one token's text (one character's, a byte-level BPE's) alone takes more
            raise InvalidOption(
                f"chunking.max_tokens is {limit}, but {part[:20]!r} alone takes {tokens} tokens of this model: "
                "ask for larger chunks",
                "chunking",
            )
        chunks.append((first, last, Chunk(spans[last - 1][1] - len(part), spans[last - 1][1], tokens)))
        if len(chunks) > most:
            return None
        if last >= len(spans):
            return chunks
        ended = last
        following = max(first + 1, last - overlap)
        starts = cuts if chunking.boundary == "token" else words
        first = _next_start(following, max(first, last - limit), last, starts, cuts)


def _next_start(following: int, first: int, last: int, starts: list[int], cuts: list[int]) -> int:
    """Where the chunk after one ending at ``last`` starts, asked at ``following`` (``last``
    without an overlap): the first of ``starts`` (words, with a boundary) from there on
    inside the overlap; else the last one before it past ``first`` (a longer overlap, whole
    words, and still a window that reaches past ``last``); else between whole characters;
    else at ``last``."""
    if following >= last:
        return last
    at = bisect_left(starts, following)
    if at < len(starts) and starts[at] < last:
        return starts[at]
    if at > 0 and starts[at - 1] > first:
        return starts[at - 1]
    at = bisect_left(cuts, following)
    return cuts[at] if at < len(cuts) and cuts[at] < last else last


def _text(text: str, spans: list[tuple[int, int]], first: int, last: int) -> str:
    """The text of tokens ``[first, last)``, without the whitespace a first token may begin with."""
    return text[spans[first][0] : spans[last - 1][1]].lstrip() or text[spans[first][0] : spans[last - 1][1]]


def _at_or_before(cuts: list[int], index: int, first: int) -> int:
    """The last place a chunk may end at or before ``index`` (past ``first``), else ``index``."""
    at = bisect_right(cuts, index) - 1
    return cuts[at] if at >= 0 and cuts[at] > first else index


def _boundary(
    text: str, spans: list[tuple[int, int]], first: int, last: int, boundary: Boundary, words: list[int], cuts: list[int]
) -> int:
    """Where a window of tokens ending at ``last`` ends at ``boundary``: the last such cut
    past ``first``; else (a sentence) the last word, else the last place one may end."""
    if boundary == "sentence":
        # A sentence ends before a word, or at a full-width stop (no gap after it).
        for cut in reversed(cuts[bisect_right(cuts, first) : bisect_right(cuts, last)]):
            end = text[spans[cut - 1][1] - 1]
            if end in FULL_WIDTH_ENDS or (end in SENTENCE_ENDS and _starts_word(text, spans, cut)):
                return cut
    if boundary != "token":
        at = bisect_right(words, last) - 1
        if at >= 0 and words[at] > first:
            return words[at]
    return _at_or_before(cuts, last, first)


def _starts_word(text: str, spans: list[tuple[int, int]], index: int) -> bool:
    return index == 0 or spans[index][0] > spans[index - 1][1] or text[spans[index][0]].isspace()


def chunk_source(inputs: list, prefix: str) -> tuple[list[str], str, bool]:
    """A chunked run's texts, their prompt, and whether the prompt is kept apart (a model
    that pools a text without its prompt's tokens: ``PromptedText``)."""
    if inputs and isinstance(inputs[0], PromptedText):
        return [item.text for item in inputs], inputs[0].prompt, True
    return [text for text in inputs if isinstance(text, str)], prefix, False
