"""A ``SentenceTransformer``: dense text embeddings.

The exported graph takes ``input_ids`` and ``attention_mask`` and runs the whole module
stack (Transformer, Pooling, Dense, Normalize...), so pooling and normalization happen
inside Triton and the gateway only tokenizes. Checked against ``SentenceTransformer.encode``
(cosine, each sentence in one padded batch and alone); a model with mean pooling also gets
the packed graph for short texts (``converters/kinds/dense/packed.py``), and load-time variants
(``@optimized``, ``@int8``) are built from the same export (``converters/kinds/dense/variants.py``).
Ranges for int8/uint8 outputs are calibrated here, once (``converters/calibration.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as pb

from embedgate.converters import calibration
from embedgate.converters.library import module_stack
from embedgate.converters.kinds.dense import packed
from embedgate.converters.library import parity
from embedgate.converters.kinds.dense import variants
from embedgate.converters.spec import EMBEDDING, ONNX_FILE, ModelMetadata, variant_model_name
from embedgate.converters.triton_config import build_text_model_config

from embedgate.converters.kinds.library import LibraryKind


class DenseConverter(LibraryKind):
    kind = "sentence_transformer"
    model_class = "SentenceTransformer"
    noun = "sentence-transformer"

    def convert(self, directories: Sequence[Path]) -> ModelMetadata:
        (out_dir,) = directories
        spec, step = self.spec, self.step
        model, transformer, prompts, max_length = self.load()
        sentences = parity.parity_sentences(max_length)

        step("computing reference embeddings with sentence-transformers")
        expected_ids = self.reference_ids(model, sentences)
        # The graph embeds the texts it is given; the gateway prepends any prompt, the default
        # one included. prompt="" keeps encode() from applying the default here.
        reference = model.encode(sentences, convert_to_numpy=True, prompt="")
        calibrated = calibration.calibrate(
            model.encode(calibration.calibration_texts(), convert_to_numpy=True, prompt="")
        )
        if spec.variant is not None:
            variants.prepare_export(model)

        onnx_file = out_dir / "1" / ONNX_FILE
        step(f"exporting ONNX (opset {module_stack.OPSET})")
        needs_token_type_ids = module_stack.takes_token_type_ids(transformer)
        module_stack.export(
            model,
            model.preprocess(sentences[:2]),
            onnx_file,
            zero_token_types=needs_token_type_ids,
            output_name=EMBEDDING,
        )
        tokenizer_file = self.save_tokenizer(transformer, out_dir, max_length)

        step(f"parity check on {len(sentences)} sentences")
        strip_whitespace, token_ids = parity.check_tokenization(tokenizer_file, sentences, expected_ids)
        variant = None
        if spec.variant is None:
            result = parity.check_embeddings(onnx_file, token_ids, reference, spec.parity_threshold)
        else:
            result, variant = variants.build(spec, model, out_dir, onnx_file, token_ids, reference, step)
        step(f"parity passed: min cosine {result.min_cosine:.6f}")
        gpu = self.gpu_graph(
            model,
            model.preprocess(sentences[:2]),
            out_dir,
            lambda run, half: parity.check_run(
                run, token_ids, reference, spec.half_parity_threshold if half else spec.parity_threshold
            ),
            half=spec.gpu_float16,
            zero_token_types=needs_token_type_ids,
        )
        packed_parity = None
        if spec.variant is None and gpu is None and spec.triton.form == "python" and spec.triton.pack_width > 0:
            step("exporting the packed graph for short texts")
            packed_parity, outcome = packed.build(
                model, needs_token_type_ids, out_dir, token_ids, reference, spec.parity_threshold, spec.triton.pack_width
            )
            step(outcome)

        return ModelMetadata(
            **self.metadata_fields(model, transformer, prompts, max_length),
            model_name=variant_model_name(spec.model_name, spec.variant),
            embedding_dim=int(reference.shape[1]),
            normalized=any(type(module).__name__ == "Normalize" for module in model),
            strip_whitespace=strip_whitespace,
            parity=result,
            variant=variant,
            packed_parity=packed_parity,
            calibration=calibrated,
            gpu=gpu,
        )

    def configs(self, metadata: ModelMetadata) -> list[pb.ModelConfig]:
        return [build_text_model_config(self.spec.triton_name, EMBEDDING, metadata.embedding_dim, self.spec.triton)]
