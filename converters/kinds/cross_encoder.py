"""A ``CrossEncoder``: a score per text or (query, document) pair, for reranking (one label)
and classification (one score per label: NLI, sentiment, toxicity).

An input is tokenized as the library does it (a pair together, ``[CLS] query [SEP] document
[SEP]`` with token type ids for BERT-style models, truncated longest-first to the model's
``max_length``); the graph runs the sequence-classification transformer and gives its
logits, to which the gateway applies the activation ``CrossEncoder.predict`` applies (a
sigmoid for one label, nothing for several, unless the model names another; those the
gateway applies are the contract's ``GATEWAY_ACTIVATIONS``), so a request may also have the
logits themselves. A model whose activation the gateway does not apply keeps it inside the
graph (and gives no raw scores). Checked against ``predict`` on pairs and single texts, short
and long: every logit, and every score the activation makes of them, within
``score_tolerance``, in one padded batch and alone.

Causal-LM rerankers that score a chat template's next token (``LogitScore``) are refused
with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2 as pb

from embedgate.contract.errors import ParityError
from embedgate.contract.kinds.cross_encoder import KIND, CrossEncoderInfo
from embedgate.contract.spec import (
    ATTENTION_MASK,
    GATEWAY_ACTIVATIONS,
    INPUT_IDS,
    LOGITS,
    ONNX_FILE,
    SCORES,
    TOKEN_TYPE_IDS,
    ModelMetadata,
    ParityResult,
)
from embedgate.converters.kinds.library import Converted, LibraryKind
from embedgate.converters.library import module_stack, parity
from embedgate.converters.triton_config import build_text_model_config


def _classifier_refusal(modules) -> str | None:
    names = [type(module).__name__ for module in modules]
    if names != ["Transformer"]:
        return f"its modules are {' -> '.join(names)}; embedgate serves a sequence-classification Transformer alone"
    task = getattr(modules[0], "transformer_task", "sequence-classification")
    if task != "sequence-classification":
        return f"its transformer's task is {task!r}; embedgate serves sequence-classification cross-encoders"
    return None


class CrossEncoderConverter(LibraryKind):
    kind = KIND
    noun = "cross-encoder"

    def refusal(self, modules) -> str | None:
        return _classifier_refusal(modules)

    def input_names(self, token_type_ids: bool) -> tuple[str, ...]:
        return (INPUT_IDS, ATTENTION_MASK, TOKEN_TYPE_IDS) if token_type_ids else (INPUT_IDS, ATTENTION_MASK)

    def convert(self, directories: Sequence[Path]) -> ModelMetadata:
        import torch

        (out_dir,) = directories
        spec, step = self.spec, self.step
        loaded = self.load()
        model, transformer = loaded.model, loaded.transformer
        max_length = self.max_length(model, loaded.routes[0].modules)
        # Pairs (reranking, NLI) and single texts (sentiment, toxicity), short and past max_length.
        inputs: list = [*parity.parity_pairs(max_length), *parity.parity_sentences(max_length)]
        token_type_ids = module_stack.takes_token_type_ids(transformer)
        labels = int(model.num_labels)

        step("computing reference scores with sentence-transformers")
        expected_ids, expected_types = _reference_tokens(model, inputs, token_type_ids)
        activation = model.activation_fn
        applied = _gateway_applies(activation)
        # The graph scores the inputs it is given; the gateway prepends any prompt to the first text.
        reference = _predict(model, inputs, activation, labels)
        logits = _predict(model, inputs, torch.nn.Identity(), labels)

        onnx_file = out_dir / "1" / ONNX_FILE
        output = LOGITS if applied else SCORES
        example = model.preprocess([list(pair) for pair in inputs[:2]])
        step(f"exporting ONNX (opset {module_stack.OPSET})")
        names = self.input_names(token_type_ids)
        after = None if applied else activation
        module_stack.export(
            model, example, onnx_file, input_names=names, output_key=SCORES, output_name=output, after=after
        )
        tokenizer_file = self.save_tokenizer(transformer, out_dir, max_length)

        step(f"parity check on {len(inputs)} pairs and texts")
        strip_whitespace, token_ids = parity.check_tokenization(tokenizer_file, inputs, expected_ids)
        types = None
        if token_type_ids:
            encodings = parity.gateway_encodings(tokenizer_file, inputs, strip=strip_whitespace)
            types = [encoding.type_ids for encoding in encodings]
            if types != expected_types:
                raise ParityError("the published tokenizer.json does not reproduce the model's token type ids")

        def check(run) -> ParityResult:
            if not applied:
                return parity.check_scores(run, token_ids, types, reference, spec.score_tolerance)
            parity.check_scores(run, token_ids, types, logits, spec.score_tolerance)

            def activated(feeds):
                with torch.no_grad():
                    return activation(torch.from_numpy(run(feeds))).numpy()

            return parity.check_scores(activated, token_ids, types, reference, spec.score_tolerance)

        result = check(parity.onnx_runner(onnx_file, output))
        step(f"parity passed: scores within {result.max_abs_error:.3g} of CrossEncoder.predict")
        gpu = self.gpu_graph(
            model,
            example,
            out_dir / "1",
            # Scores are held to an absolute tolerance float16 does not keep: float32 only.
            lambda run, half: check(run),
            half=False,
            input_names=names,
            output_key=SCORES,
            after=after,
        )
        return ModelMetadata(
            **self.metadata_fields(
                model, loaded, Converted(max_length, strip_whitespace, result, self.do_lower_case(transformer))
            ),
            model_name=spec.model_name,
            embedding_dim=labels,
            normalized=False,
            gpu=gpu,
            record=CrossEncoderInfo(
                num_labels=labels,
                activation=_qualified_name(activation),
                token_type_ids=token_type_ids,
                logits=applied,
                labels=_labels(model.config, labels),
            ),
        )

    def configs(self, metadata: ModelMetadata) -> list[pb.ModelConfig]:
        info = metadata.record_of(CrossEncoderInfo)
        assert info is not None
        output = LOGITS if info.logits else SCORES
        names = self.input_names(info.token_type_ids)
        return [
            build_text_model_config(
                self.spec.triton_name, output, info.num_labels, self.spec.triton, names,
                max_width=metadata.max_seq_length,
            )
        ]


def _reference_tokens(model, inputs: list, token_type_ids: bool):
    """Each input's token ids (and type ids) as the model's own preprocessing makes them."""
    ids, types = [], []
    for item in inputs:
        features = model.preprocess([list(item)] if isinstance(item, tuple) else [item])
        mask = features[ATTENTION_MASK].numpy()
        ids += parity.reference_token_ids(features[INPUT_IDS].numpy(), mask)
        if token_type_ids:
            types += parity.reference_token_ids(features[TOKEN_TYPE_IDS].numpy(), mask)
    return ids, (types if token_type_ids else None)


def _predict(model, inputs: list, activation, labels: int) -> np.ndarray:
    """``CrossEncoder.predict`` of each input ([inputs, labels]): pairs together, a single
    text alone (``predict`` takes one text by itself)."""
    pairs = [list(item) for item in inputs if isinstance(item, tuple)]
    scores = list(model.predict(pairs, prompt="", activation_fn=activation, convert_to_numpy=True, batch_size=8))
    rows = iter(scores)
    out = [
        next(rows) if isinstance(item, tuple)
        else model.predict(item, prompt="", activation_fn=activation, convert_to_numpy=True)
        for item in inputs
    ]
    return np.asarray(out, dtype=np.float32).reshape(len(inputs), labels)


def _gateway_applies(activation) -> bool:
    """Whether the gateway applies ``activation`` to the logits (else it stays in the graph):
    one of the contract's, and a softmax over an input's own labels."""
    if _qualified_name(activation) not in GATEWAY_ACTIVATIONS:
        return False
    return type(activation).__name__ != "Softmax" or getattr(activation, "dim", None) in (None, 1, -1)


def _labels(config, labels: int) -> list[str]:
    names = getattr(config, "id2label", None) or {}
    return [str(names.get(index, names.get(str(index), f"LABEL_{index}"))) for index in range(labels)]


def _qualified_name(activation) -> str:
    if activation is None:
        return "none"
    cls = activation if isinstance(activation, type) else type(activation)
    return f"{cls.__module__}.{cls.__qualname__}"
