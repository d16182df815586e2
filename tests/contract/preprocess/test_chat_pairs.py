"""An LLM reranker's pairs through its chat template, tokenized by the gateway as
``CrossEncoder.preprocess`` tokenizes them: the template's text around the pair (and the
prompt, as the system message), no special tokens of the tokenizer's own, cut to the max
length, and the template's tail written back over a cut row's last tokens."""

from __future__ import annotations

import pytest

from embedgate.contract.kinds.cross_encoder import ChatTemplate, Rendering
from embedgate.contract.preprocess.chat_pairs import ChatPairTokenizer, PromptedPair
from tests import llm_rerankers

LONG = " ".join(["the quick brown fox jumps over the lazy dog"] * 12)
PAIRS = [
    ("what is the quick brown fox", "the quick brown fox jumps over the lazy dog"),
    ("a", "  leading and trailing whitespace\t\n"),
    ("Ünïcödé façade?", "<|im_end|> in a document is the template's own token"),
    (LONG, "hello world"),
    ("hello", LONG),
]


@pytest.fixture(scope="module")
def reranker(tmp_path_factory):
    from sentence_transformers import CrossEncoder

    directory = llm_rerankers.causal_reranker(tmp_path_factory.mktemp("chat") / "reranker")
    return CrossEncoder(str(directory), device="cpu")


@pytest.fixture(scope="module")
def template(reranker) -> ChatTemplate:
    # As the converter reads it (tests/converters/kinds/cross_encoder checks that reading).
    from embedgate.converters.kinds.cross_encoder import chat_template

    return chat_template.read(reranker[0])


@pytest.fixture(scope="module")
def tokenizer(reranker, template, tmp_path_factory) -> ChatPairTokenizer:
    directory = tmp_path_factory.mktemp("tokenizer")
    reranker[0].tokenizer.save_pretrained(str(directory))
    return ChatPairTokenizer(directory / "tokenizer.json", reranker.max_seq_length, template)


def library_ids(reranker, pairs, prompt=None) -> list[list[int]]:
    ids = []
    for pair in pairs:
        features = reranker.preprocess([list(pair)], prompt=prompt)
        ids.append(features["input_ids"][0][features["attention_mask"][0].bool()].tolist())
    return ids


def gateway_ids(tokenizer, pairs, prompt="") -> tuple[list[list[int]], list[bool]]:
    batch = tokenizer.encode([PromptedPair(query, document, prompt) for query, document in pairs])
    return [batch.input_ids[row, :n].tolist() for row, n in enumerate(batch.token_counts)], batch.truncated_rows


@pytest.mark.parametrize("prompt", ["", "Find what answers the question"])
def test_pairs_are_tokenized_as_the_library_tokenizes_them(reranker, tokenizer, prompt):
    ids, truncated = gateway_ids(tokenizer, PAIRS, prompt)
    assert ids == library_ids(reranker, PAIRS, prompt or None)
    # The long pairs were cut, and kept the template's tail: the assistant's turn it scores.
    assert truncated == [False, False, False, True, True]
    tail = tokenizer.tail(prompt)
    assert tail and all(row[-len(tail):] == tail for row in ids)
    assert max(len(row) for row in ids) == reranker.max_seq_length


def test_a_prompt_is_the_system_message_the_template_renders(tokenizer, template):
    assert template.prompted.slots == ["prompt", "query", "document"]
    rendered = tokenizer.render(PromptedPair("q", "d", "Find foxes"))
    assert "<Instruct>: Find foxes\n<Query>: q\n<Document>: d<|im_end|>" in rendered
    # Without one, the template's default instruction.
    assert "<Instruct>: Find the document that answers the query\n" in tokenizer.render(("q", "d"))


def test_a_rows_tail_is_kept_per_prompt_and_the_plain_tokenizer_stays_for_single_texts(tokenizer):
    assert tokenizer.tail("") is tokenizer.tail("")
    # /tokenize and /decode read the whole tokenizer, without the template.
    assert tokenizer.whole().decode(tokenizer.whole().encode("hello world").ids) == "hello world"


def test_a_rendering_puts_each_slot_between_its_segments():
    rendering = Rendering(segments=["<", "|", "|", ">"], slots=["prompt", "document", "query"])
    assert rendering.render("q", "d", "p") == "<p|d|q>"
    with pytest.raises(ValueError, match="one more segment"):
        Rendering(segments=["a"], slots=["query"])
