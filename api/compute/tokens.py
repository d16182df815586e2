"""What a model's tokenizer makes of texts, in full, and of token ids back: each token's id,
its text and where it is in the text (TEI's ``/tokenize`` and ``/decode``).

A text is tokenized as the model's route for the request's task tokenizes it, with the
prompt the request chose before it (the model's default prompt when it names none; a
vision-language model's text in its chat template, the prompt its system message), but
not cut to the model's max length: a client counts what a text costs, and sees whether it
would be cut. Offsets are in bytes of the prompted (or rendered) text's UTF-8, as TEI gives
them. The work runs in the tokenizer pool, off the event loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from embedgate.contract.preprocess.text import TextTokenizer

from ..errors import WrongModelKind
from .requests.asks import Served
from .requests.prompts import PromptChoice, prompt_for
from .requests.routes import route_for
from .scheduling.threads import OffLoopThreads


@dataclass(frozen=True)
class Token:
    id: int
    # A special token's own text ("[CLS]"); any other's, the text it covers.
    text: str
    special: bool
    # Bytes of the prompted text the token covers, [start, stop); None for a special token.
    start: int | None
    stop: int | None


class Tokens:
    def __init__(self, pool: OffLoopThreads):
        self._pool = pool

    async def tokenize(
        self, model: Served, texts: list[str], *, prompt: PromptChoice, add_special_tokens: bool
    ) -> list[list[Token]]:
        route = route_for(model.routes, prompt.route_task, model.name)
        prefix = prompt_for(model.name, model.metadata, prompt)
        tokenizer = _text_tokenizer(model, route.tokenizer)
        read = [tokenizer.as_read(text, prefix, add_special_tokens) for text in texts]
        prompted, special = [text for text, _ in read], any(adds for _, adds in read)
        return await self._pool.run(tokenized, tokenizer, prompted, special)

    async def decode(self, model: Served, ids: list[list[int]], *, skip_special_tokens: bool) -> list[str]:
        tokenizer = _text_tokenizer(model, route_for(model.routes, None, model.name).tokenizer)
        whole = tokenizer.whole()
        return await self._pool.run(lambda: whole.decode_batch(ids, skip_special_tokens=skip_special_tokens))


def _text_tokenizer(model: Served, tokenizer: object) -> TextTokenizer:
    if not isinstance(tokenizer, TextTokenizer):
        raise WrongModelKind(
            f"model '{model.name}' is {model.kind.title}: tokenizing and decoding are for sentence-transformers' "
            "text tokenizers"
        )
    return tokenizer


def tokenized(tokenizer: TextTokenizer, texts: list[str], add_special_tokens: bool) -> list[list[Token]]:
    """Each text's tokens, as the tokenizer gives them in full (a model that strips its texts
    has them stripped; offsets stay those of the text as given)."""
    prepared = [text.strip() for text in texts] if tokenizer.strip_whitespace else texts
    encodings = tokenizer.whole().encode_batch(prepared, add_special_tokens=add_special_tokens)
    return [_tokens(text, kept, encoding) for text, kept, encoding in zip(texts, prepared, encodings)]


def _tokens(text: str, kept: str, encoding) -> list[Token]:
    # Where the kept text starts in the text (after any whitespace stripped off its start).
    lead = len(text) - len(text.lstrip()) if len(kept) != len(text) else 0
    at = _byte_offsets(text)
    tokens = []
    for token_id, (start, stop), special, piece in zip(
        encoding.ids, encoding.offsets, encoding.special_tokens_mask, encoding.tokens
    ):
        if special:
            tokens.append(Token(token_id, piece, True, None, None))
        else:
            start, stop = start + lead, stop + lead
            tokens.append(Token(token_id, text[start:stop], False, at(start), at(stop)))
    return tokens


def _byte_offsets(text: str):
    """Character offset -> byte offset in ``text``'s UTF-8."""
    if text.isascii():
        return lambda offset: offset
    positions = [0]
    for character in text:
        positions.append(positions[-1] + len(character.encode()))
    return positions.__getitem__
