"""A ``CrossEncoder``: a score per text or (query, document) pair, a reranker's relevance
(one label) or a classifier's score per label."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from embedgate.contract.kinds.base import Kind, KindRecord

# What a chat template puts between its fixed text: the pair's two texts, and the prompt
# (``predict(prompt=...)`` gives a chat-template model its prompt as a system message).
Slot = Literal["query", "document", "prompt"]


class Rendering(BaseModel):
    """A pair as the chat template renders it: ``segments[0] + slot 0's text + segments[1] +
    ... + segments[-1]``, each slot's text as it is (the converter checks that the template
    puts the texts in unchanged and that its fixed text does not depend on them)."""

    segments: list[str]
    slots: list[Slot]

    @model_validator(mode="after")
    def _segments_around_slots(self) -> Rendering:
        if len(self.segments) != len(self.slots) + 1:
            raise ValueError("a rendering has one more segment than slots")
        return self

    def render(self, query: str, document: str, prompt: str = "") -> str:
        values = {"query": query, "document": document, "prompt": prompt}
        parts = [self.segments[0]]
        for slot, segment in zip(self.slots, self.segments[1:]):
            parts += [values[slot], segment]
        return "".join(parts)


class ChatTemplate(BaseModel):
    """How a cross-encoder whose transformer takes chat messages (a tokenizer with a chat
    template: LLM rerankers such as Qwen3-Reranker) makes one sequence of a (query,
    document) pair, as ``Transformer.preprocess`` does: the pair as a "query" and a
    "document" message (after a "system" message holding the prompt, where there is one),
    rendered by the template, tokenized without the tokenizer's own special tokens, cut to
    the max length on ``truncation_side``, and, where a row was cut (``restore_suffix``),
    the template's fixed tail (the assistant's turn it scores) written back over its last
    tokens."""

    plain: Rendering
    # With a prompt (a system message); the same as ``plain`` where the template ignores it.
    prompted: Rendering
    truncation_side: Literal["right", "left"] = "right"
    restore_suffix: bool = True


class LogitScoreInfo(BaseModel):
    """A causal LM scored by its next token (``LogitScore``): the logit of ``true_token_id``
    at the last token, less that of ``false_token_id`` where there is one. The graph computes
    only those logits, at each row's last real token."""

    true_token_id: int
    false_token_id: int | None = None
    # For people: the tokens' texts ("yes", "no").
    true_token: str = ""
    false_token: str | None = None


class CrossEncoderInfo(KindRecord):
    """A cross-encoder's graph: texts or (query, document) pairs in, ``num_labels`` values
    out: the logits (``logits``), to which the gateway applies the activation
    ``CrossEncoder.predict`` applies, or, for models converted before that and activations
    the gateway does not apply, the scores with the activation already inside."""

    key = "cross_encoder"

    num_labels: int = Field(ge=1)
    # The activation's class (torch.nn.Sigmoid for one label, unless the model names another).
    activation: str
    # The graph takes token_type_ids (BERT-style pairs: 0 for the query, 1 for the document).
    token_type_ids: bool
    # The graph's output is LOGITS (True) or SCORES (False: converted before, or an activation
    # the gateway does not apply; such a model gives no raw scores).
    logits: bool = False
    # Each label's name, by index (the model's id2label; "LABEL_<i>" where it names none).
    labels: list[str] = Field(default_factory=list)
    # A pair's sequence comes from the model's chat template (None: the tokenizer's pair
    # encoding, ``[CLS] query [SEP] document [SEP]`` for BERT).
    chat_template: ChatTemplate | None = None
    # A causal LM scored by its next token's logits (None: a sequence-classification head).
    logit_score: LogitScoreInfo | None = None


KIND = Kind("cross_encoder", record=CrossEncoderInfo, library_class="CrossEncoder")
