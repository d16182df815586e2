"""A cross-encoder: a score per text or (query, document) pair, as ``CrossEncoder.predict``
gives it, its activation included: a reranker's relevance score (one label; ``/rerank``)
or a classifier's score per label (``/predict``, which a reranker answers too). An input
is tokenized as one (a pair together, or rendered by the model's chat template with the
prompt as its system message: LLM rerankers), and merged with other requests' inputs like
any text. The graph gives the logits and the gateway applies the activation
(``activations.py``), so a request may have the logits as they are (``raw_scores``)."""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field

from embedgate.contract.kinds.cross_encoder import KIND, CrossEncoderInfo
from embedgate.contract.preprocess.chat_pairs import ChatPairTokenizer, PromptedPair
from embedgate.contract.preprocess.text import PairTokenizer, TokenBatch
from embedgate.contract.spec import LOGITS, SCORES, TOKEN_TYPE_IDS

from ....errors import InvalidInput
from ..activations import ACTIVATIONS, SIGMOID, SOFTMAX
from ..asks import Ask, Output, Plan, Run, Scores, Served, joined
from ..prompts import prompt_for
from ..routes import route_for
from .base import Files, ServedKind


class CrossEncoderKind(ServedKind):
    name = KIND.name
    title = "a cross-encoder (a score per text or text pair)"
    outputs = frozenset({Output.RERANK, Output.PREDICT})
    listing_fields = {
        "num_labels": (int | None, Field(None, description="Cross-encoders: scores per input (1: a reranker).")),
        "activation": (str | None, Field(None, description="Cross-encoders: the activation applied to the logits.")),
        "labels": (
            list[str] | None,
            Field(None, description="Cross-encoders: each label's name, as POST /predict answers them."),
        ),
    }

    @property
    def output(self) -> str:  # type: ignore[override]
        info = self.metadata.record_of(CrossEncoderInfo)
        return LOGITS if info is not None and info.logits else SCORES

    def gives(self) -> frozenset[Output]:
        info = self.metadata.record_of(CrossEncoderInfo)
        # A reranker has one score per pair; a classifier scores its labels.
        return self.outputs if info is None or info.num_labels == 1 else frozenset({Output.PREDICT})

    def labels(self) -> list[str]:
        info = self.metadata.record_of(CrossEncoderInfo)
        count = info.num_labels if info is not None else self.metadata.embedding_dim
        named = info.labels if info is not None else []
        return named if len(named) == count else [f"LABEL_{index}" for index in range(count)]

    def _takes_token_types(self) -> bool:
        info = self.metadata.record_of(CrossEncoderInfo)
        return info is not None and info.token_type_ids

    def tokenizer(self, files: Files, triton_name: str) -> PairTokenizer:
        metadata = self.metadata
        info = metadata.record_of(CrossEncoderInfo)
        if info is not None and info.chat_template is not None:
            return ChatPairTokenizer(self.tokenizer_file(files, triton_name), metadata.max_seq_length, info.chat_template)
        return PairTokenizer(
            self.tokenizer_file(files, triton_name),
            metadata.max_seq_length,
            metadata.strip_whitespace,
            type_ids=self._takes_token_types(),
        )

    def text_inputs(self, batch: TokenBatch, rows: np.ndarray | slice, width: int) -> dict[str, np.ndarray]:
        tensors = super().text_inputs(batch, rows, width)
        if self._takes_token_types():
            assert batch.token_type_ids is not None
            tensors[TOKEN_TYPE_IDS] = np.ascontiguousarray(batch.token_type_ids[rows, :width])
        return tensors

    def scores(self, outputs: np.ndarray, wanted: Scores = Scores.MODEL) -> np.ndarray:
        """The graph's outputs as the request wants them: with the model's activation (as
        ``predict`` gives them), the logits, or TEI's probabilities."""
        info = self.metadata.record_of(CrossEncoderInfo)
        if info is None or not info.logits:
            # The activation is inside the graph: its scores are all there is.
            inside = info.activation if info is not None else None
            if wanted is Scores.MODEL or (wanted is Scores.PROBABILITIES and inside == self._probabilities()):
                return outputs
            what = "raw_scores" if wanted is Scores.RAW else f"scores as {wanted.value}"
            raise InvalidInput(
                f"{what}: this model was converted with its activation inside its graph; "
                "delete it and load it again for its logits"
            )
        if wanted is Scores.RAW:
            return outputs
        activation = info.activation if wanted is Scores.MODEL else self._probabilities()
        return ACTIVATIONS[activation](outputs)

    def _probabilities(self) -> str:
        """TEI's activation: a softmax over several labels, a sigmoid for one."""
        return SOFTMAX if len(self.labels()) > 1 else SIGMOID

    def plan(self, model: Served, ask: Ask) -> Plan:
        route = route_for(model.routes, None, model.name)
        prompt = prompt_for(model.name, model.metadata, ask.prompt)
        wanted = ask.options.scores
        info = self.metadata.record_of(CrossEncoderInfo)
        inputs: list
        if info is not None and info.chat_template is not None:
            inputs = self._chat_pairs(model.name, ask, prompt)
        elif ask.output is Output.RERANK:
            # predict(prompt=...) puts the prompt before the query, the pair's first text.
            query = prompt + (ask.query or "")
            inputs = [(query, document) for document in ask.inputs]
        else:
            inputs = [prompt + item if isinstance(item, str) else (prompt + item[0], item[1]) for item in ask.inputs]
        return Plan([Run(route, inputs)], lambda results: joined(results, self.scores(results[0].vectors, wanted)))

    @staticmethod
    def _chat_pairs(model_name: str, ask: Ask, prompt: str) -> list:
        """A chat-template model's pairs, each with the prompt its template renders as the
        system message (``predict(prompt=...)`` gives it so): pairs only, its template has
        no place for a text alone."""
        if ask.output is Output.RERANK:
            return [PromptedPair(ask.query or "", document, prompt) for document in ask.inputs]
        if any(isinstance(item, str) for item in ask.inputs):
            raise InvalidInput(
                f"model '{model_name}' scores (query, document) pairs through its chat template, which has no place "
                "for a single text: give each input as a pair"
            )
        return [PromptedPair(query, document, prompt) for query, document in ask.inputs]

    def listing(self) -> dict[str, Any]:
        info = self.metadata.record_of(CrossEncoderInfo)
        if info is None:
            return {}
        return {"num_labels": info.num_labels, "activation": info.activation, "labels": self.labels()}
