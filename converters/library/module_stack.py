"""What the sentence-transformers kinds share: where the model comes from, loading it as
the class its directory declares, exporting a module stack as one ONNX graph, and saving
its tokenizer for the gateway.

A sentence-transformers model of any class (``SentenceTransformer``, ``SparseEncoder``,
``CrossEncoder``, ``MultiVectorEncoder``) is a stack of modules that pass a dict of
features along: the first, a ``Transformer``, reads ``input_ids`` and ``attention_mask``;
the last leaves the output under a key (``sentence_embedding``, ``scores`` for a
CrossEncoder, ``token_embeddings`` for a multi-vector model). The exported graph takes the
token tensors and runs the whole stack (of one route, where a Router picks modules by task:
``routes.py``), so pooling, heads and activations happen inside Triton and the gateway only
tokenizes.
"""

from __future__ import annotations

import contextlib
import re
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from embedgate.contract.errors import ConversionError, ModelNotFoundError, RemoteCodeRefused, UnsupportedModelError
from embedgate.contract.sources import packaged_model_dir
from embedgate.contract.spec import ATTENTION_MASK, INPUT_IDS, TOKEN_TYPE_IDS, ConversionSpec
from embedgate.converters.hub.snapshot import fetch

OPSET = 17
# Tokenizers without a length limit report ~1e30; the parity sentences must stay tractable.
MAX_SUPPORTED_SEQ_LENGTH = 32768

Step = Callable[[str], None]


@dataclass(frozen=True)
class Source:
    location: str  # the directory the model class loads
    description: str  # recorded in metadata.json; in messages (a hub model's names no path of this host)


def resolve_source(spec: ConversionSpec, step: Step | None = None) -> Source:
    """Where the model is read from: its ``model_path``, the package it is installed as, or
    its hub snapshot (from the hub cache, downloaded first where it is not whole there and
    downloads are allowed: ``converters/hub/``), its download told to ``step``."""
    if spec.model_path:
        path = Path(spec.model_path)
        if not path.is_dir():
            raise ModelNotFoundError(f"model_path {spec.model_path} is not a directory")
        return Source(str(path.resolve()), f"local:{path.resolve()}")
    # A model installed as a package (MiniLM's): resolved as the gateway resolves it
    # (contract/sources/locate.py), so the two sides compare the same files. A revision
    # names the hub's copy.
    packaged = packaged_model_dir(spec.model_name) if spec.revision is None else None
    if packaged is not None:
        path, release = packaged
        return Source(str(path), f"pypi:{release.partition('==')[0]} ({path})")
    snapshot = fetch(spec.model_name, spec.revision, allow_network=spec.allow_network, report=step or _quiet)
    return Source(str(snapshot.path), snapshot.described())


def _quiet(message: str, data: dict | None = None) -> None:
    pass


def load(model_class: str, source: Source, spec: ConversionSpec):
    """The model as ``sentence_transformers.<model_class>`` loads it, in float32 eval mode."""
    import sentence_transformers

    cls = getattr(sentence_transformers, model_class)
    try:
        model = cls(source.location, device="cpu", trust_remote_code=spec.trust_remote_code)
    except (OSError, ValueError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        # The directory a hub model was downloaded to is this host's business, not the client's.
        first_line = first_line.replace(source.location, "the model's directory")
        if "trust_remote_code" in str(error) and not spec.trust_remote_code:
            # Code of its own the checks before loading did not see (a tokenizer's, a subfolder's config).
            raise RemoteCodeRefused(
                f"the model runs code of its own when it is loaded ({first_line[:200]}): load it with "
                "trust_remote_code (where the server allows it)"
            ) from error
        raise ModelNotFoundError(f"cannot load model from {source.description}: {first_line}") from error
    # Models stored in half precision still serve float32 outputs; upcasting is lossless.
    return model.float().eval()


def text_transformer(modules: Sequence):
    """The first of a module stack, checked to be a text Transformer the gateway can tokenize for."""
    transformer = modules[0]
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


def stack_graph(
    modules,
    input_names: Sequence[str],
    zero_token_types: bool,
    output_key: str,
    after: Callable | None,
    pad_token_id: int | None = None,
):
    import torch

    # A Pooling that leaves a prompt's tokens out (include_prompt=False) reads which they are
    # from the attention mask: PROMPT_TOKEN marks them (contract/preprocess/prompted.py). The
    # transformer attends to them as to any token; the Pooling gets the mask of the others.
    marked = ATTENTION_MASK in input_names and any(
        getattr(module, "include_prompt", True) is False for module in modules
    )

    class StackGraph(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stack = torch.nn.ModuleList(list(modules))

        def forward(self, *inputs):
            features = dict(zip(input_names, inputs))
            marks = features[ATTENTION_MASK] if marked else None
            if marks is not None:
                features[ATTENTION_MASK] = (marks > 0).to(marks.dtype)
            if zero_token_types:
                # Single-segment input: the segment ids are all zero, built in the graph.
                features[TOKEN_TYPE_IDS] = torch.zeros_like(features[INPUT_IDS])
            if pad_token_id is not None:
                features[INPUT_IDS] = padded_with(features[INPUT_IDS], features[ATTENTION_MASK], pad_token_id)
            for module in self.stack:
                if marks is not None and getattr(module, "include_prompt", True) is False:
                    attended = features[ATTENTION_MASK]
                    features[ATTENTION_MASK] = (marks == 1).to(marks.dtype)
                    features = module(features)
                    features[ATTENTION_MASK] = attended
                    continue
                features = module(features)
            output = features[output_key]
            if after is not None:
                output = after(output)
            return output.to(torch.float32)

    return StackGraph().eval()


def export(
    modules,
    example: dict,
    onnx_file: Path,
    *,
    input_names: Sequence[str] = (INPUT_IDS, ATTENTION_MASK),
    zero_token_types: bool = False,
    output_key: str = "sentence_embedding",
    output_name: str,
    after: Callable | None = None,
    pad_token_id: int | None = None,
) -> None:
    """Export a module stack (``modules``: a model, or one route's modules): ``input_names``
    in (dynamic batch and sequence axes), ``features[output_key]`` (then ``after`` of it) out
    as ``output_name`` (per token where ``output_key`` is token_embeddings). ``zero_token_types``:
    the transformer takes token_type_ids the graph does not; it gets zeros. ``pad_token_id``:
    the model tells padding by its id (a decoder's sequence-classification head scores the
    last token that is not one), so the gateway's padding becomes that id in the graph. A
    failure says which module and operator failed, and what to try."""
    graph = stack_graph(modules, input_names, zero_token_types, output_key, after, pad_token_id)
    per_token = output_key == "token_embeddings"
    export_graph(graph, example, onnx_file, modules, input_names=input_names, output_name=output_name, per_token=per_token)


def padded_with(input_ids, attention_mask, pad_token_id: int):
    """``input_ids`` with ``pad_token_id`` wherever the mask is 0: padding as the model's own
    tokenizer pads (the gateway pads with 0)."""
    import torch

    return torch.where(attention_mask.bool(), input_ids, torch.full_like(input_ids, pad_token_id))


def export_graph(
    graph,
    example: dict,
    onnx_file: Path,
    modules: Sequence,
    *,
    input_names: Sequence[str],
    output_name: str,
    per_token: bool = False,
    fixed_shape: bool = False,
) -> None:
    """Export ``graph`` (a module taking ``input_names`` in order) to ``onnx_file``, traced on
    ``example``: dynamic batch and sequence axes (the batch axis only, for inputs of a
    ``fixed_shape``: images), one output (per token where ``per_token``).
    A failure names ``modules`` (what the graph runs), the operator or library code where it
    stopped, and what to try."""
    import onnx
    import torch

    onnx_file.parent.mkdir(parents=True, exist_ok=True)
    # Two texts of different lengths: the trace then follows the masked (padded) path.
    inputs = tuple(example[name] for name in input_names)
    dynamic = {0: "batch"} if fixed_shape else {0: "batch", 1: "sequence"}
    output_axes = {0: "batch", 1: "sequence"} if per_token else {0: "batch"}
    try:
        with torch.no_grad(), warnings.catch_warnings(), index_based_masks():
            # The tracer warns about shape-dependent Python branches; parity decides.
            warnings.simplefilter("ignore")
            torch.onnx.export(
                graph,
                inputs,
                str(onnx_file),
                input_names=list(input_names),
                output_names=[output_name],
                dynamic_axes={**{name: dynamic for name in input_names}, output_name: output_axes},
                opset_version=OPSET,
                do_constant_folding=True,
                dynamo=False,
            )
    except (RuntimeError, TypeError, ValueError, NotImplementedError, AttributeError, IndexError) as error:
        raise export_failure(error, modules) from error
    onnx.checker.check_model(str(onnx_file))


def graph_inputs(onnx_file: Path) -> tuple[str, ...]:
    """The inputs the exported graph declares, in order: those it was given that it reads
    (the exporter drops an input nothing reads: DeBERTa-v2's token_type_ids, which its
    tokenizer gives and its embeddings, of no token types, never read)."""
    import onnx

    graph = onnx.load(str(onnx_file), load_external_data=False).graph
    weights = {initializer.name for initializer in graph.initializer}
    return tuple(value.name for value in graph.input if value.name not in weights)


@contextlib.contextmanager
def index_based_masks() -> Iterator[None]:
    """transformers builds an attention mask with ``torch.vmap`` where a model adds a mask
    function of its own (Gemma 3 with bidirectional attention: EmbeddingGemma), and vmap
    cannot be traced (the exporter stops at ``unordered_map::at``). The mask functions
    transformers' models pass are index-based, so the mask is built here by broadcasting
    indices instead, as it is for every other model; parity then checks the graph."""
    try:
        from transformers import masking_utils
    except ImportError:
        yield
        return
    registry = masking_utils.ALL_MASK_ATTENTION_FUNCTIONS
    saved = {key: registry._local_mapping[key] for key in list(registry._local_mapping)}

    def without_vmap(function):
        def build(*args, **kwargs):
            kwargs["use_vmap"] = False
            return function(*args, **kwargs)

        return build

    for key in list(registry):
        if "use_vmap" in _parameters(registry[key]):
            registry[key] = without_vmap(registry[key])
    try:
        yield
    finally:
        registry._local_mapping.clear()
        registry._local_mapping.update(saved)


def _parameters(function) -> set[str]:
    import inspect

    try:
        return set(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return set()


# Where an export stops: the innermost frame in the libraries' model code, or in a model's
# own (trust_remote_code: transformers imports it from its transformers_modules cache).
_LIBRARY_CODE = re.compile(r"(transformers_modules|transformers|sentence_transformers)/(.+\.py)$")
OWN_CODE = "transformers_modules"
_OPERATOR = re.compile(r"operator '?([\w:.]+)'?", re.IGNORECASE)


def export_failure(error: BaseException, modules: Sequence) -> UnsupportedModelError:
    """An export that failed, in words a user can act on: the model's architecture and
    module chain, the operator or the library code where it stopped, and what to try."""
    modules = list(modules)
    names = " -> ".join(type(module).__name__ for module in modules)
    config = getattr(getattr(modules[0], "auto_model", None), "config", None) if modules else None
    architecture = ", ".join(getattr(config, "architectures", None) or []) or getattr(config, "model_type", "") or "?"
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    operator = _OPERATOR.search(message)
    if operator and "onnx" in message.lower():
        where = f"the ONNX exporter (opset {OPSET}) has no conversion of operator {operator.group(1)}"
    else:
        frames = [frame for frame in traceback.extract_tb(error.__traceback__) if _LIBRARY_CODE.search(frame.filename)]
        site = _LIBRARY_CODE.search(frames[-1].filename) if frames else None
        if site is None:
            where = "tracing stopped"
        elif site.group(1) == OWN_CODE:
            where = f"tracing stopped in the model's own code, {Path(site.group(2)).name} ({frames[-1].name}, line {frames[-1].lineno})"
        else:
            where = f"tracing stopped in {site.group(1)}/{site.group(2)} ({frames[-1].name}, line {frames[-1].lineno})"
        where += f" with {type(error).__name__}: {message[:200]}"
    own_code = any(OWN_CODE in frame.filename for frame in traceback.extract_tb(error.__traceback__))
    advice = (
        "What to try: its code must trace (no Python branch on a tensor's values, no data-dependent shapes, "
        "operators the ONNX exporter has: see the manual's page on models with their own code), or a port of "
        "the model to an architecture transformers has"
        if own_code else
        "What to try: a newer embedgate (its torch and transformers export more architectures), or the same "
        "model saved by a current transformers release"
    )
    return UnsupportedModelError(
        f"unsupported model: its {architecture} transformer ({names}) does not export to ONNX: {where}. "
        f"{advice}; nothing was published"
    )


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
