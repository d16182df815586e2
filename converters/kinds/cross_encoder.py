"""A ``CrossEncoder``: a relevance score per (query, document) pair, for reranking.

The pair is tokenized together (``[CLS] query [SEP] document [SEP]`` with token type ids
for BERT-style models, truncated longest-first to the model's ``max_length``, as the
library does it); the graph runs the sequence-classification transformer and the
activation ``CrossEncoder.predict`` applies (a sigmoid for one label, unless the model
names another), so Triton returns the very scores ``predict`` returns. Checked against
``predict`` on pairs short and long: every score within ``score_tolerance``, in one padded
batch and alone.

A reranker has one label: classifiers with several (NLI) and causal-LM rerankers that
score a chat template's next token (``LogitScore``) are refused with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as pb

from embedgate.converters.library import module_stack, parity
from embedgate.converters.errors import ParityError
from embedgate.converters.spec import (
    ATTENTION_MASK,
    INPUT_IDS,
    ONNX_FILE,
    SCORES,
    TOKEN_TYPE_IDS,
    CrossEncoderInfo,
    ModelMetadata,
)
from embedgate.converters.triton_config import build_text_model_config

from embedgate.converters.kinds.library import LibraryKind


def _reranker_refusal(model) -> str | None:
    names = [type(module).__name__ for module in model]
    if names != ["Transformer"]:
        return f"its modules are {' -> '.join(names)}; embedgate serves a sequence-classification Transformer alone"
    task = getattr(model[0], "transformer_task", "sequence-classification")
    if task != "sequence-classification":
        return f"its transformer's task is {task!r}; embedgate serves sequence-classification rerankers"
    if model.num_labels != 1:
        return f"it has {model.num_labels} labels (a classifier); a reranker gives one score per pair"
    return None


class CrossEncoderConverter(LibraryKind):
    kind = "cross_encoder"
    model_class = "CrossEncoder"
    noun = "cross-encoder"

    def refusal(self, model) -> str | None:
        return _reranker_refusal(model)

    def max_length(self, model) -> int | None:
        return model.max_length

    def input_names(self, token_type_ids: bool) -> tuple[str, ...]:
        return (INPUT_IDS, ATTENTION_MASK, TOKEN_TYPE_IDS) if token_type_ids else (INPUT_IDS, ATTENTION_MASK)

    def convert(self, directories: Sequence[Path]) -> ModelMetadata:
        (out_dir,) = directories
        spec, step = self.spec, self.step
        model, transformer, prompts, max_length = self.load()
        pairs = parity.parity_pairs(max_length)
        token_type_ids = module_stack.takes_token_type_ids(transformer)

        step("computing reference scores with sentence-transformers")
        features = model.preprocess([list(pair) for pair in pairs])
        expected_ids = parity.reference_token_ids(features[INPUT_IDS].numpy(), features[ATTENTION_MASK].numpy())
        expected_types = (
            parity.reference_token_ids(features[TOKEN_TYPE_IDS].numpy(), features[ATTENTION_MASK].numpy())
            if token_type_ids
            else None
        )
        # The graph scores the pairs it is given; the gateway prepends any prompt to the query.
        reference = model.predict([list(pair) for pair in pairs], prompt="", convert_to_numpy=True, batch_size=8)
        activation = model.activation_fn

        onnx_file = out_dir / "1" / ONNX_FILE
        step(f"exporting ONNX (opset {module_stack.OPSET})")
        names = self.input_names(token_type_ids)
        module_stack.export(
            model,
            model.preprocess([list(pair) for pair in pairs[:2]]),
            onnx_file,
            input_names=names,
            output_key=SCORES,
            output_name=SCORES,
            after=activation,
        )
        tokenizer_file = self.save_tokenizer(transformer, out_dir, max_length)

        step(f"parity check on {len(pairs)} pairs")
        strip_whitespace, token_ids = parity.check_tokenization(tokenizer_file, pairs, expected_ids)
        types = None
        if token_type_ids:
            encodings = parity.gateway_encodings(tokenizer_file, pairs, strip=strip_whitespace)
            types = [encoding.type_ids for encoding in encodings]
            if types != expected_types:
                raise ParityError("the published tokenizer.json does not reproduce the model's token type ids")
        result = parity.check_scores(
            parity.onnx_runner(onnx_file, SCORES), token_ids, types, reference, spec.score_tolerance
        )
        step(f"parity passed: scores within {result.max_abs_error:.3g} of CrossEncoder.predict")
        gpu = self.gpu_graph(
            model,
            model.preprocess([list(pair) for pair in pairs[:2]]),
            out_dir,
            # Scores are held to an absolute tolerance float16 does not keep: float32 only.
            lambda run, half: parity.check_scores(run, token_ids, types, reference, spec.score_tolerance),
            half=False,
            input_names=names,
            output_key=SCORES,
            after=activation,
        )
        return ModelMetadata(
            **self.metadata_fields(model, transformer, prompts, max_length),
            model_name=spec.model_name,
            embedding_dim=int(model.num_labels),
            normalized=False,
            strip_whitespace=strip_whitespace,
            parity=result,
            gpu=gpu,
            cross_encoder=CrossEncoderInfo(
                num_labels=int(model.num_labels),
                activation=_qualified_name(activation),
                token_type_ids=token_type_ids,
            ),
        )

    def configs(self, metadata: ModelMetadata) -> list[pb.ModelConfig]:
        assert metadata.cross_encoder is not None
        names = self.input_names(metadata.cross_encoder.token_type_ids)
        return [
            build_text_model_config(
                self.spec.triton_name, SCORES, metadata.cross_encoder.num_labels, self.spec.triton, names
            )
        ]


def _qualified_name(activation) -> str:
    if activation is None:
        return "none"
    cls = activation if isinstance(activation, type) else type(activation)
    return f"{cls.__module__}.{cls.__qualname__}"
