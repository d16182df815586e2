"""Texts whose prompt is left out of pooling: the gateway counts a prompt's tokens as
sentence-transformers counts them, and marks them in each row's attention mask."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from embedgate.contract.preprocess.prompted import PromptedText, PromptMarkingTokenizer
from embedgate.contract.preprocess.text import TextTokenizer
from embedgate.contract.spec import PROMPT_TOKEN

PROMPTS = ["query: ", "query:", "Represent the Wikipedia sentence for retrieving documents: ", "Ünïcödé 🚀 ", "x"]


@pytest.fixture
def tokenizer(minilm, minilm_path) -> PromptMarkingTokenizer:
    special_ids = sorted(minilm.tokenizer.all_special_ids)
    return PromptMarkingTokenizer(Path(minilm_path) / "tokenizer.json", 16, special_ids=special_ids)


@pytest.mark.parametrize("prompt", [*PROMPTS, "word " * 40])
def test_a_prompts_tokens_are_counted_as_the_library_counts_them(minilm, tokenizer, prompt):
    saved = minilm.max_seq_length
    minilm.max_seq_length = 16
    try:
        assert tokenizer.prompt_tokens(prompt) == minilm[0]._get_prompt_length(prompt)
    finally:
        minilm.max_seq_length = saved
        minilm[0]._prompt_length_mapping.clear()  # counted at 16 tokens: not the model's own


def test_each_rows_prompt_tokens_are_marked_and_the_rest_is_the_texts(minilm_path, tokenizer):
    texts = [PromptedText("query: ", "a man eats"), "a man eats", PromptedText("", "a man eats"),
             PromptedText("Represent the sentence: ", "word " * 30)]
    batch = tokenizer.encode(texts)
    plain = TextTokenizer(Path(minilm_path) / "tokenizer.json", 16).encode(
        ["query: a man eats", "a man eats", "a man eats", "Represent the sentence: " + "word " * 30]
    )
    np.testing.assert_array_equal(batch.input_ids, plain.input_ids)
    assert batch.token_counts == plain.token_counts and batch.truncated_rows == plain.truncated_rows
    marked = [int((row == PROMPT_TOKEN).sum()) for row in batch.attention_mask]
    assert marked == [tokenizer.prompt_tokens("query: "), 0, 0, tokenizer.prompt_tokens("Represent the sentence: ")]
    # Marked from each row's first token ([CLS] with them), then the text's, then padding.
    first = batch.attention_mask[0]
    assert first[: marked[0]].tolist() == [PROMPT_TOKEN] * marked[0]
    assert set(first[marked[0] : plain.token_counts[0]]) == {1} and not first[plain.token_counts[0] :].any()


def test_a_prompt_past_a_rows_tokens_marks_the_row_whole(tokenizer):
    prompt = "word " * 40
    batch = tokenizer.encode([PromptedText(prompt, "a man eats")])
    # The library counts the prompt cut to the max length less its [SEP]: all but the row's last token.
    assert tokenizer.prompt_tokens(prompt) == 15
    assert batch.attention_mask[0].tolist() == [PROMPT_TOKEN] * 15 + [1]
