"""Tokenizing in full and decoding with a model's own tokenizer (MiniLM's tokenizer.json):
the ids its tokenizer gives, uncut, the prompt tokenized with the text, byte offsets into the
prompted text, and ids decoded back."""

from __future__ import annotations

import asyncio
from embedgate.api.compute.scheduling.threads import OffLoopThreads
from dataclasses import dataclass, field

import pytest
from tokenizers import Tokenizer

from embedgate.api.compute.requests.kinds import kind_of
from embedgate.api.compute.requests.prompts import PromptChoice
from embedgate.api.compute.requests.routes import EVERY_TASK, Route
from embedgate.api.compute.tokens import Token, Tokens, tokenized
from embedgate.api.errors import WrongModelKind
from embedgate.contract.preprocess.text import TextTokenizer
from tests.api.conftest import fake_metadata


@pytest.fixture(scope="module")
def tokenizer_file(minilm_path):
    return f"{minilm_path}/tokenizer.json"


@dataclass
class Model:
    tokenizer: object
    name: str = "org/minilm"
    changes: dict = field(default_factory=dict)

    @property
    def metadata(self):
        return fake_metadata(self.name, max_seq_length=8, prompts={"query": "query: "}, **self.changes)

    @property
    def kind(self):
        return kind_of(self.metadata)

    @property
    def routes(self):
        return [Route("", EVERY_TASK, self.tokenizer, "part")]


def tokenize(model, texts, prompt_name=None, add_special_tokens=True):
    tokens = Tokens(OffLoopThreads(1, "tokenize"))
    return asyncio.run(
        tokens.tokenize(model, texts, prompt=PromptChoice(prompt_name=prompt_name), add_special_tokens=add_special_tokens)
    )


def test_the_tokenizers_own_ids_in_full_with_byte_offsets(tokenizer_file):
    model = Model(TextTokenizer(tokenizer_file, max_length=8))
    text = "naïve café " * 6  # more tokens than the model's 8: not cut
    (tokens,) = tokenize(model, [text])
    reference = Tokenizer.from_file(tokenizer_file)
    reference.no_truncation()
    reference.no_padding()
    assert [token.id for token in tokens] == reference.encode(text).ids and len(tokens) > 8
    assert tokens[0] == Token(101, "[CLS]", True, None, None) and tokens[-1].special
    encoded = text.encode()
    for token in tokens[1:-1]:
        assert encoded[token.start : token.stop].decode() == token.text
    assert tokens[1].text == "naïve" and (tokens[1].start, tokens[1].stop) == (0, 6)
    # The batch encoder keeps cutting at the model's length: tokenizing in full uses its own.
    assert model.tokenizer.encode([text]).token_counts == [8]


def test_the_prompt_is_tokenized_with_the_text_and_stripped_texts_keep_their_offsets(tokenizer_file):
    model = Model(TextTokenizer(tokenizer_file, max_length=8, strip_whitespace=True))
    (tokens,) = tokenize(model, ["  hello"], prompt_name="query", add_special_tokens=False)
    assert [token.text for token in tokens] == ["query", ":", "hello"]
    assert (tokens[2].start, tokens[2].stop) == (9, 14)  # in "query:   hello"
    (tokens,) = tokenize(model, ["  hello "], add_special_tokens=False)
    assert [(token.text, token.start, token.stop) for token in tokens] == [("hello", 2, 7)]


def test_decode_in_the_pool(tokenizer_file):
    model = Model(TextTokenizer(tokenizer_file, max_length=8))
    tokens = Tokens(OffLoopThreads(1, "tokenize"))
    texts = asyncio.run(tokens.decode(model, [[101, 7592, 2088, 102], [7592]], skip_special_tokens=True))
    assert texts == ["hello world", "hello"]
    kept = asyncio.run(tokens.decode(model, [[101, 7592, 102]], skip_special_tokens=False))
    assert kept == ["[CLS] hello [SEP]"]


def test_a_model_without_a_text_tokenizer_is_refused(tokenizer_file):
    with pytest.raises(WrongModelKind, match="text tokenizers"):
        tokenize(Model(object()), ["a"])


def test_tokenized_is_the_pools_work(tokenizer_file):
    rows = tokenized(TextTokenizer(tokenizer_file, max_length=8), ["a", "b c"], add_special_tokens=False)
    assert [[token.text for token in row] for row in rows] == [["a"], ["b", "c"]]
