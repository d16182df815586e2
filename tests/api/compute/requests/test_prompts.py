"""The prompt a request's texts get, chosen as sentence-transformers chooses it."""

from __future__ import annotations

import pytest

from embedgate.api.compute.requests.prompts import DEFAULT, PromptChoice, prompt_for
from embedgate.api.errors import PromptError
from tests.api.conftest import fake_metadata

# e5's prompts as sentence-transformers 6.x holds them: it adds an empty "document".
E5 = {"query": "query: ", "passage": "passage: ", "document": ""}


def chosen(choice: PromptChoice = DEFAULT, **metadata) -> str:
    return prompt_for("org/m", fake_metadata("org/m", **metadata), choice)


def refused(choice: PromptChoice, **metadata) -> PromptError:
    with pytest.raises(PromptError) as caught:
        chosen(choice, **metadata)
    return caught.value


def test_by_name_as_text_or_the_default():
    assert chosen(PromptChoice(prompt_name="passage"), prompts=E5) == "passage: "
    assert chosen(PromptChoice(prompt="Represent this: "), prompts=E5) == "Represent this: "
    assert chosen(prompts=E5) == ""
    assert chosen(prompts=E5, default_prompt_name="query") == "query: "
    # An empty prompt, given or named, is no prompt: not even the default (as encode() does).
    assert chosen(PromptChoice(prompt=""), prompts=E5, default_prompt_name="query") == ""
    assert chosen(PromptChoice(prompt_name="document"), prompts=E5, default_prompt_name="query") == ""


@pytest.mark.parametrize(
    "input_type, prompts, expected",
    [
        ("query", E5, "query: "),
        # document and passage: whichever the model defines, a non-empty one first.
        ("document", E5, "passage: "),
        ("passage", E5, "passage: "),
        ("passage", {"query": "q: ", "document": "d: "}, "d: "),
        ("document", {"query": "q: ", "document": "d: ", "passage": "p: "}, "d: "),
        # Qwen3-Embedding: documents get no prompt.
        ("document", {"query": "Instruct: x\nQuery:", "document": ""}, ""),
        ("passage", {"query": "Instruct: x\nQuery:", "document": ""}, ""),
        # A model with no prompts at all: no prompt, as sentence-transformers gives it.
        ("query", {}, ""),
    ],
)
def test_input_types(input_type, prompts, expected):
    assert chosen(PromptChoice(input_type=input_type), prompts=prompts) == expected


def test_an_unknown_name_or_input_type_lists_the_models_prompts():
    error = refused(PromptChoice(prompt_name="search"), prompts=E5)
    assert (error.code, error.param) == ("unknown_prompt", "prompt_name")
    assert error.message == "model 'org/m' has no prompt named 'search'; its prompts: 'query', 'passage', 'document'"
    error = refused(PromptChoice(input_type="query"), prompts={"classification": "c: "})
    assert (error.code, error.param) == ("unknown_prompt", "input_type")
    assert "no prompt for input_type 'query'; its prompts: 'classification'" in error.message
    assert refused(PromptChoice(prompt_name="query"), prompts={}).message.endswith("its prompts: none")


def test_a_model_whose_pooling_leaves_prompts_out_takes_none():
    why = "its Pooling module leaves the prompt's tokens out of pooling (include_prompt=False)"
    for choice in (PromptChoice(prompt_name="query"), PromptChoice(prompt="x: "), PromptChoice(input_type="query")):
        error = refused(choice, prompts=E5, prompts_refused=why)
        assert error.code == "prompts_unsupported" and why in error.message
    # An empty prompt is no prompt: nothing to refuse.
    assert chosen(PromptChoice(input_type="query"), prompts={"query": ""}, prompts_refused=why) == ""
    assert chosen(prompts=E5, prompts_refused=why) == ""


def test_a_model_converted_before_prompts_were_recorded_takes_none_but_works_without():
    assert chosen() == ""
    assert chosen(PromptChoice(prompt="")) == ""
    for choice, param in (
        (PromptChoice(prompt_name="query"), "prompt_name"),
        (PromptChoice(input_type="document"), "input_type"),
        (PromptChoice(prompt="x: "), "prompt"),
    ):
        error = refused(choice)
        assert (error.code, error.param) == ("prompts_unsupported", param)
        assert "converted before embedgate recorded prompts" in error.message


def test_a_task_gets_its_prompt_as_encode_query_and_encode_document_choose():
    # encode_document tries document, passage, corpus in that order (E5's document is empty).
    assert chosen(PromptChoice(task="query"), prompts=E5) == "query: "
    assert chosen(PromptChoice(task="document"), prompts=E5) == ""
    assert chosen(PromptChoice(task="document"), prompts={"passage": "p: "}) == "p: "
    # Without a prompt of its own the task falls back to the default, as those methods do.
    assert chosen(PromptChoice(task="query"), prompts={"all": "a: "}, default_prompt_name="all") == "a: "
    # A prompt named or given wins over the task's.
    assert chosen(PromptChoice(task="query", prompt_name="passage"), prompts=E5) == "passage: "


@pytest.mark.parametrize(
    "choice, task",
    [
        (PromptChoice(), None),
        (PromptChoice(task="document"), "document"),
        (PromptChoice(prompt_name="query"), "query"),
        (PromptChoice(prompt_name="passage"), "document"),
        (PromptChoice(prompt_name="classification"), None),
        (PromptChoice(input_type="passage"), "document"),
        (PromptChoice(task="query", prompt_name="passage"), "query"),
    ],
)
def test_the_route_a_request_takes_is_its_task_or_the_one_its_prompt_stands_for(choice, task):
    assert choice.route_task == task
