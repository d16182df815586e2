"""A ``CrossEncoder``: a score per text or (query, document) pair, for reranking (one label)
and classification (one score per label: NLI, sentiment, toxicity).

Two module stacks are served:

- a sequence-classification ``Transformer`` alone (BERT-style rerankers and classifiers,
  and decoders with a classification head, such as Qwen3-Reranker converted to one): the
  graph runs it and gives its logits; a head that finds its last token by the padding id
  sees the tokenizer's padding id where the gateway pads;
- a causal LM scored by its next token (``Transformer`` with ``text-generation``, then
  ``LogitScore``: Qwen3-Reranker and its kind): ``logit_score.py``.

An input is tokenized as the library does it: a pair together (``[CLS] query [SEP] document
[SEP]`` with token type ids for BERT-style models, truncated longest-first to the model's
``max_length``), or, where the transformer takes chat messages, rendered by the model's
chat template (``chat_template.py``); the gateway applies the activation
``CrossEncoder.predict`` applies (a sigmoid for one label, nothing for several, unless the
model names another; those the gateway applies are the contract's ``GATEWAY_ACTIVATIONS``),
so a request may also have the logits themselves. A model whose activation the gateway does
not apply keeps it inside the graph (and gives no raw scores). Checked against ``predict``
on pairs and single texts (pairs only, through a chat template), short and long: the
gateway's tokens are the library's, and every logit, and every score the activation makes
of them, is within ``score_tolerance``, in one padded batch and alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as pb

from embedgate.contract.errors import ParityError
from embedgate.contract.kinds.cross_encoder import KIND, CrossEncoderInfo
from embedgate.contract.spec import (
    ATTENTION_MASK,
    INPUT_IDS,
    LOGITS,
    ONNX_FILE,
    SCORES,
    TOKEN_TYPE_IDS,
    GpuInfo,
    ModelMetadata,
    ParityResult,
)
from embedgate.converters.kinds.cross_encoder import chat_template, logit_score, reference
from embedgate.converters.kinds.library import Converted, LibraryKind
from embedgate.converters.library import module_stack, parity
from embedgate.converters.triton_config import build_text_model_config


def _refusal(modules) -> str | None:
    names = [type(module).__name__ for module in modules]
    if names == ["Transformer", logit_score.LOGIT_SCORE]:
        return logit_score.refusal(modules)
    if names != ["Transformer"]:
        return (
            f"its modules are {' -> '.join(names)}; embedgate serves a sequence-classification Transformer alone, "
            "or a causal LM's Transformer then LogitScore"
        )
    task = getattr(modules[0], "transformer_task", "sequence-classification")
    if task != "sequence-classification":
        return f"its transformer's task is {task!r}; embedgate serves sequence-classification cross-encoders"
    return None


class CrossEncoderConverter(LibraryKind):
    kind = KIND
    noun = "cross-encoder"

    def refusal(self, modules) -> str | None:
        return _refusal(modules)

    def input_names(self, token_type_ids: bool) -> tuple[str, ...]:
        return (INPUT_IDS, ATTENTION_MASK, TOKEN_TYPE_IDS) if token_type_ids else (INPUT_IDS, ATTENTION_MASK)

    def convert(self, directories: Sequence[Path]) -> ModelMetadata:
        import torch

        (out_dir,) = directories
        spec, step = self.spec, self.step
        loaded = self.load()
        model, transformer = loaded.model, loaded.transformer
        modules = loaded.routes[0].modules
        score = modules[1] if len(modules) == 2 else None
        max_length = self.max_length(model, modules)
        template = chat_template.read(transformer) if chat_template.uses_chat_template(transformer) else None
        pairs = parity.parity_pairs(max_length)
        # Pairs (reranking, NLI) and single texts (sentiment, toxicity), short and past
        # max_length; a chat template renders pairs only.
        inputs: list = pairs if template else [*pairs, *parity.parity_sentences(max_length)]
        prompts = sorted({text for text in loaded.prompts.prompts.values() if text} | {chat_template.PROBE_PROMPT})
        if template is not None:
            step("its pairs go through its chat template; checking that the gateway renders it as the library does")
            chat_template.check_renders(transformer, template, pairs, prompts)
        token_type_ids = module_stack.takes_token_type_ids(transformer)
        labels = int(model.num_labels)

        step("computing reference scores with sentence-transformers")
        expected_ids, expected_types = reference.tokens(model, inputs, token_type_ids)
        activation = model.activation_fn
        applied = reference.gateway_applies(activation)
        # The graph scores the inputs it is given; the gateway prepends any prompt to the first text.
        scores = reference.predict(model, inputs, activation, labels)
        logits = reference.predict(model, inputs, torch.nn.Identity(), labels)

        tokenizer_file = self.save_tokenizer(transformer, out_dir, max_length)
        step(f"checking the gateway's tokens of {len(inputs)} pairs and texts")
        types = None
        if template is not None:
            strip_whitespace = False
            token_ids = chat_template.check_tokens(
                model, tokenizer_file, max_length, template, pairs, expected_ids, prompts
            )
        else:
            strip_whitespace, token_ids = parity.check_tokenization(tokenizer_file, inputs, expected_ids)
            if token_type_ids:
                encodings = parity.gateway_encodings(tokenizer_file, inputs, strip=strip_whitespace)
                types = [encoding.type_ids for encoding in encodings]
                if types != expected_types:
                    raise ParityError("the published tokenizer.json does not reproduce the model's token type ids")

        def check(run) -> ParityResult:
            if not applied:
                return parity.check_scores(run, token_ids, types, scores, spec.score_tolerance)
            parity.check_scores(run, token_ids, types, logits, spec.score_tolerance)

            def activated(feeds):
                with torch.no_grad():
                    return activation(torch.from_numpy(run(feeds))).numpy()

            return parity.check_scores(activated, token_ids, types, scores, spec.score_tolerance)

        # The gateway's tensors for two inputs of different lengths, right-padded as it pads.
        example = {
            name: torch.from_numpy(value)
            for name, value in parity.pad(token_ids[:2], None if types is None else types[:2]).items()
        }
        output = LOGITS if applied else SCORES
        offered = self.input_names(token_type_ids)
        after = None if applied else activation
        onnx_file = out_dir / "1" / ONNX_FILE
        step(f"exporting ONNX (opset {module_stack.OPSET})")

        def declared() -> tuple[str, ...]:
            """The inputs the exported graph reads, all of which the tokenizer gives: the
            gateway feeds it those (DeBERTa-v2's embeddings read no token types its
            tokenizer gives: they are left out), the parity check too."""
            nonlocal types, token_type_ids
            names = module_stack.graph_inputs(onnx_file)
            unknown = [name for name in names if name not in offered]
            if unknown:
                raise ParityError(f"the exported graph takes {', '.join(unknown)}, which the tokenizer does not give")
            if TOKEN_TYPE_IDS not in names:
                types, token_type_ids = None, False
            return names

        if score is not None:
            modality = "message" if template is not None else "text"
            with logit_score.narrowed_head(transformer, score):
                graph = logit_score.graph(transformer, score, offered, modality, after)
                module_stack.export_graph(graph, example, onnx_file, modules, input_names=offered, output_name=output)
                names = declared()
                result = check(parity.onnx_runner(onnx_file, output))
                if names != offered:
                    graph = logit_score.graph(transformer, score, names, modality, after)
                gpu = self._gpu_of_graph(graph, example, out_dir / "1", check, names)
        else:
            pad_id = reference.pad_token_id(transformer)
            module_stack.export(
                model, example, onnx_file, input_names=offered, output_key=SCORES, output_name=output, after=after,
                pad_token_id=pad_id,
            )
            names = declared()
            result = check(parity.onnx_runner(onnx_file, output))
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
                pad_token_id=pad_id,
            )
        step(f"parity passed: scores within {result.max_abs_error:.3g} of CrossEncoder.predict")
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
                activation=reference.qualified_name(activation),
                token_type_ids=token_type_ids,
                logits=applied,
                labels=reference.labels(model.config, labels),
                chat_template=template,
                logit_score=None if score is None else logit_score.info(transformer, score),
            ),
        )

    def _gpu_of_graph(self, graph, example: dict, version_dir: Path, check, names: Sequence[str]) -> GpuInfo | None:
        """The GPU instances' TorchScript graph of a scoring graph this kind made (float32 only:
        scores are held to an absolute tolerance float16 does not keep)."""
        import copy

        def make(dtype, device):
            return copy.deepcopy(graph).to(device=device, dtype=dtype)

        with module_stack.index_based_masks():
            return self.gpu_module(
                make, [example[name] for name in names], version_dir, lambda run, half: check(run),
                half=False, input_names=names,
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
