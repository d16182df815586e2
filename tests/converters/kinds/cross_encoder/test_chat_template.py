"""A cross-encoder's chat template read into text around markers, as the gateway renders
it, and refused where that could not be the library's rendering: a template that drops the
query or the document, changes them, or whose own text depends on them."""

from __future__ import annotations

import pytest

from embedgate.contract.errors import UnsupportedModelError
from embedgate.converters.kinds.cross_encoder import chat_template
from embedgate.converters.library import parity
from tests import llm_rerankers

PAIRS = parity.parity_pairs(24)[:4]
DOCUMENT = "D: {{ (messages | selectattr('role', 'eq', 'document') | first).content }}"
UPPER_QUERY = "Q: {{ (messages | selectattr('role', 'eq', 'query') | first).content | upper }} " + DOCUMENT
LONG_QUERY_NOTED = (
    "{% set q = (messages | selectattr('role', 'eq', 'query') | first).content %}"
    "{% if q | length > 40 %}long {% endif %}Q: {{ q }} "
) + DOCUMENT


def loaded(tmp_path, template):
    from sentence_transformers import CrossEncoder

    return CrossEncoder(str(llm_rerankers.causal_reranker(tmp_path / "model", chat_template=template)), device="cpu")


def test_the_templates_text_around_the_pair_and_the_prompt(tmp_path):
    transformer = loaded(tmp_path, llm_rerankers.CHAT_TEMPLATE)[0]
    assert chat_template.uses_chat_template(transformer)
    template = chat_template.read(transformer)
    assert template.plain.segments[0].startswith("<|im_start|>system\nAnswer yes or no.")
    assert template.plain.segments[-1] == "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n"
    chat_template.check_renders(transformer, template, PAIRS, [chat_template.PROBE_PROMPT])


def test_a_model_without_a_template_takes_text_pairs(tmp_path):
    assert not chat_template.uses_chat_template(loaded(tmp_path, None)[0])


@pytest.mark.parametrize(
    "template, reason",
    [
        # A chat template for conversations: no "query" or "document" message reaches it.
        ("{% for m in messages %}{% if m.role == 'user' %}{{ m.content }}{% endif %}{% endfor %}",
         "leaves out the pair's query and document"),
        (UPPER_QUERY, "changes the texts"),
        (LONG_QUERY_NOTED, "changes the texts"),
    ],
)
def test_templates_the_gateway_could_not_render_exactly_are_refused(tmp_path, template, reason):
    transformer = loaded(tmp_path, template)[0]
    with pytest.raises(UnsupportedModelError, match=reason):
        chat_template.check_renders(transformer, chat_template.read(transformer), PAIRS, [])
