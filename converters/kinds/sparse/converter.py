"""A ``SparseEncoder`` of the SPLADE family: a weight per vocabulary token.

SPLADE is a masked-language-model transformer followed by ``SpladePooling``
(``log(1 + relu(logits))``, masked, then the max or the sum over the tokens). The graph
runs both and outputs the full vector over the vocabulary; the gateway keeps the non-zero
weights (and the largest ``top_k``, or the model's own ``max_active_dims``), as
``SparseEncoder.encode`` does. Checked against ``encode``: the same non-zero weights and
cosine 0.9999, each sentence in one padded batch and alone.

Other sparse architectures (an inference-free ``Router`` with static query weights, a
``SparseAutoEncoder`` head) are refused with the reason rather than served differently.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as pb

from embedgate.converters.library import module_stack, parity
from embedgate.converters.spec import EMBEDDING, ONNX_FILE, ModelMetadata, SparseInfo
from embedgate.converters.triton_config import build_text_model_config

from embedgate.converters.kinds.library import LibraryKind


def _splade_refusal(model) -> str | None:
    """Why ``model`` is not a SPLADE model the graph reproduces, or None when it is."""
    names = [type(module).__name__ for module in model]
    if len(names) != 2 or names[1] != "SpladePooling":
        return f"its modules are {' -> '.join(names)}; embedgate serves SPLADE (a Transformer, then SpladePooling)"
    task = getattr(model[0], "transformer_task", "fill-mask")
    if task != "fill-mask":
        return f"its transformer's task is {task!r}, not 'fill-mask' (a masked-language-model head)"
    return None


class SparseConverter(LibraryKind):
    kind = "sparse_encoder"
    model_class = "SparseEncoder"
    noun = "sparse encoder"

    def refusal(self, model) -> str | None:
        return _splade_refusal(model)

    def convert(self, directories: Sequence[Path]) -> ModelMetadata:
        (out_dir,) = directories
        spec, step = self.spec, self.step
        model, transformer, prompts, max_length = self.load()
        sentences = parity.parity_sentences(max_length)
        # The graph computes every weight; max_active_dims (the model's own top-k) is the
        # gateway's to apply, as encode() applies it after the forward pass.
        max_active_dims, model.max_active_dims = model.max_active_dims, None

        step("computing reference sparse vectors with sentence-transformers")
        expected_ids = self.reference_ids(model, sentences)
        reference = model.encode(sentences, prompt="", convert_to_sparse_tensor=False).float().numpy()

        onnx_file = out_dir / "1" / ONNX_FILE
        step(f"exporting ONNX (opset {module_stack.OPSET})")
        module_stack.export(
            model,
            model.preprocess(sentences[:2]),
            onnx_file,
            zero_token_types=module_stack.takes_token_type_ids(transformer),
            output_name=EMBEDDING,
        )
        tokenizer_file = self.save_tokenizer(transformer, out_dir, max_length)

        step(f"parity check on {len(sentences)} sentences")
        strip_whitespace, token_ids = parity.check_tokenization(tokenizer_file, sentences, expected_ids)
        result = parity.check_sparse(parity.onnx_runner(onnx_file), token_ids, reference, spec.parity_threshold)
        step(f"parity passed: the same non-zero weights, min cosine {result.min_cosine:.6f}")
        gpu = self.gpu_graph(
            model,
            model.preprocess(sentences[:2]),
            out_dir,
            # Which weights are zero is what a sparse vector is: float16 is not tried.
            lambda run, half: parity.check_sparse(run, token_ids, reference, spec.parity_threshold),
            half=False,
            zero_token_types=module_stack.takes_token_type_ids(transformer),
        )
        pooling = model[1]
        return ModelMetadata(
            **self.metadata_fields(model, transformer, prompts, max_length),
            model_name=spec.model_name,
            embedding_dim=int(reference.shape[1]),
            normalized=False,
            strip_whitespace=strip_whitespace,
            parity=result,
            gpu=gpu,
            sparse=SparseInfo(
                max_active_dims=max_active_dims,
                pooling=str(pooling.pooling_strategy),
                activation=str(pooling.activation_function),
            ),
        )

    def configs(self, metadata: ModelMetadata) -> list[pb.ModelConfig]:
        return [build_text_model_config(self.spec.triton_name, EMBEDDING, metadata.embedding_dim, self.spec.triton)]
