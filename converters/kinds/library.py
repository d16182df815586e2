"""What the converters of sentence-transformers' classes share: the model loaded as the
class its directory declares, its routes (``library/routes.py``) each checked to be a stack
the gateway can serve, each route's graph in a Triton version of its own, its tokenizer
saved and checked, and the metadata every one of them records."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar

from embedgate.contract.errors import UnsupportedModelError
from embedgate.contract.spec import (
    EMBEDDING,
    ONNX_FILE,
    ROUTES_DIR,
    TOKENIZER_DIR,
    ConversionSpec,
    GpuInfo,
    ModelMetadata,
    ParityResult,
    RouteInfo,
)
from embedgate.converters.kinds.base import KindConverter, Step
from embedgate.converters.library import gpu, module_stack, parity
from embedgate.converters.library import routes as model_routes
from embedgate.converters.library.declared import Declared
from embedgate.converters.library.module_stack import Source
from embedgate.converters.library.prompts import Prompts, read_prompts
from embedgate.converters.library.routes import ModuleRoute


@dataclass(frozen=True)
class Loaded:
    model: Any
    routes: list[ModuleRoute]
    prompts: Prompts

    @property
    def transformer(self):
        """The first route's Transformer (kinds served as one stack have one route)."""
        return self.routes[0].modules[0]


@dataclass
class Converted:
    """What converting one route gave: how its texts are tokenized and its parity."""

    max_seq_length: int
    strip_whitespace: bool
    parity: ParityResult
    do_lower_case: bool = False
    add_special_tokens: bool = True
    # A route the gateway computes: its vectors scaled to unit length after its static weights.
    normalized: bool = False
    # Kind-specific results (the dense kind's packed graph, GPU graph, calibration...).
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Exported:
    """A route's graph and tokenizer, published, and the gateway's tokenization of the
    parity sentences (checked to be the model's)."""

    onnx_file: Path
    tokenizer_file: Path
    # What the graph was traced with.
    example: dict
    zero_token_types: bool
    strip_whitespace: bool
    token_ids: list[list[int]]


def task_of(route: ModuleRoute) -> dict[str, Any]:
    """The keyword to encode and preprocess a route's texts with (none for a model without
    routes: the library's default)."""
    return {"task": route.task} if route.name else {}


class LibraryKind(KindConverter):
    """A sentence-transformers model of class ``model_class``: one Triton model whose
    versions are its routes' graphs (one where it has no Router), the tokenizer beside it."""

    # For messages: "unsupported cross-encoder: ...".
    noun: ClassVar[str]
    # Whether a model of this kind may hold a Router (each route served on its own).
    serves_routes: ClassVar[bool] = False
    # Whether it builds load-time variants ("@optimized", "@int8").
    serves_variants: ClassVar[bool] = False
    # Whether a model none of whose routes runs a graph is served (the gateway computes it
    # whole from static weights, with no Triton model).
    serves_gateway_only: ClassVar[bool] = False

    def __init__(self, spec: ConversionSpec, step: Step, source: Source, declared: Declared):
        super().__init__(spec, step)
        self.source = source
        self.declared = declared
        self.started = time.monotonic()

    @property
    def model_class(self) -> str:
        """The sentence-transformers class it loads a model as: the kind's, as the contract declares it."""
        assert self.kind.library_class is not None, f"{self.kind.name} is no sentence-transformers class"
        return self.kind.library_class

    def load(self) -> Loaded:
        """The model, its routes and its prompts, refused if the gateway could not serve
        every route exactly."""
        self.step(f"loading model as a {self.model_class} from {self.source.description}")
        model = module_stack.load(self.model_class, self.source, self.spec)
        found = model_routes.routes(model)
        if found[0].name:
            if not self.serves_routes:
                raise UnsupportedModelError(
                    f"unsupported {self.noun}: it routes its inputs through different modules per task (a Router "
                    f"with routes {model_routes.describe(found)}); embedgate serves routes of SentenceTransformer "
                    "and SparseEncoder models"
                )
            self.step(f"its Router's routes (tasks): {model_routes.describe(found)}")
        for route in found:
            reason = self.route_refusal(route)
            if reason is not None:
                raise UnsupportedModelError(f"unsupported {self.noun}: {reason}")
        # Before any export: a default prompt the graph cannot apply refuses the conversion.
        modules = [module for route in found for module in route.modules]
        prompts = read_prompts(model, modules, self.prompt_exclusion_refusal(found))
        return Loaded(model, found, prompts)

    def route_refusal(self, route: ModuleRoute) -> str | None:
        """Why a route cannot be served exactly as this kind, or None. By default a route is a
        graph over a text Transformer and what follows it (``refusal``)."""
        module_stack.text_transformer(route.modules)
        reason = self.refusal(route.modules)
        if reason is not None and route.name:
            return f"its route '{route.name}': {reason}"
        return reason

    def refusal(self, modules: Sequence) -> str | None:
        """Why a module stack cannot be served exactly as this kind, or None."""
        return None

    def prompt_exclusion_refusal(self, routes: list[ModuleRoute]) -> str | None:
        """Where a module leaves a prompt's tokens out of pooling (``include_prompt=False``):
        why this kind cannot serve prompts for these routes (its prompts are then refused),
        or None where its graph pools around them (``library/prompts.py``)."""
        return "which embedgate serves for SentenceTransformer models only"

    def max_length(self, model, modules: Sequence) -> int:
        """The most tokens a text of this stack keeps."""
        return module_stack.checked_max_length(modules[0].max_seq_length)

    def convert_routes(
        self,
        loaded: Loaded,
        out_dir: Path,
        convert: Callable[[ModuleRoute, Path | None, Path], Converted],
    ) -> tuple[list[Converted], list[RouteInfo] | None]:
        """Each route converted by ``convert(route, version_dir, files_dir)``: its graph in
        the Triton version ``version_dir`` (None for a route the gateway computes, where
        ``is_static``), its tokenizer (and any files of its own) in ``files_dir``. The
        routes' metadata, where the model has a Router or no graph at all."""
        converted: list[Converted] = []
        infos: list[RouteInfo] = []
        version = 0
        for index, route in enumerate(loaded.routes):
            static = self.is_static(route)
            if not static:
                version += 1
            if loaded.routes[0].name:
                self.step(f"route '{route.name}' ({', '.join(route.tasks)})")
            files_dir = out_dir if index == 0 else out_dir / ROUTES_DIR / str(index)
            result = convert(route, None if static else out_dir / str(version), files_dir)
            converted.append(result)
            infos.append(
                RouteInfo(
                    name=route.name,
                    tasks=list(route.tasks),
                    version=None if static else version,
                    max_seq_length=result.max_seq_length,
                    do_lower_case=result.do_lower_case,
                    strip_whitespace=result.strip_whitespace,
                    add_special_tokens=result.add_special_tokens,
                    normalized=result.normalized,
                    parity=result.parity,
                )
            )
        if version == 0 and not self.serves_gateway_only:
            raise UnsupportedModelError(
                f"unsupported {self.noun}: none of its routes runs a transformer; embedgate serves models with one"
            )
        # A model the gateway computes whole records its one route, which says so.
        return converted, infos if loaded.routes[0].name or version == 0 else None

    def export_route(
        self, model, route: ModuleRoute, version_dir: Path, files_dir: Path, sentences: list[str], expected_ids,
        max_length: int,
    ) -> Exported:
        """A route's module stack exported as ``version_dir``'s graph (``EMBEDDING`` out), its
        tokenizer saved in ``files_dir``, and the gateway's tokenization of ``sentences``
        checked against ``expected_ids`` (the model's)."""
        transformer = route.modules[0]
        onnx_file = version_dir / ONNX_FILE
        example = model.preprocess(sentences[:2], **task_of(route))
        self.step(f"exporting ONNX (opset {module_stack.OPSET})")
        zero_token_types = module_stack.takes_token_type_ids(transformer)
        module_stack.export(route.modules, example, onnx_file, zero_token_types=zero_token_types, output_name=EMBEDDING)
        tokenizer_file = self.save_tokenizer(transformer, files_dir, max_length)
        self.step(f"parity check on {len(sentences)} sentences")
        strip_whitespace, token_ids = parity.check_tokenization(tokenizer_file, sentences, expected_ids)
        return Exported(onnx_file, tokenizer_file, example, zero_token_types, strip_whitespace, token_ids)

    def is_static(self, route: ModuleRoute) -> bool:
        """Whether the gateway computes this route itself (no Triton version)."""
        return False

    def gpu_graph(self, modules, example: dict, version_dir: Path, check: gpu.Check, **options) -> GpuInfo | None:
        """The TorchScript graph of GPU instances (``library/gpu.py``), where the model
        is published for them; None for CPU instances."""
        if not self.on_gpu_instances():
            return None
        return gpu.build(modules, example, version_dir, check, self.step, **options)

    def gpu_module(self, make: Callable, inputs: Sequence, version_dir: Path, check: gpu.Check, **options) -> GpuInfo | None:
        """``gpu_graph`` for a graph the kind makes itself (``make(dtype, device)``, traced on
        ``inputs``: ``gpu.build_module``)."""
        if not self.on_gpu_instances():
            return None
        return gpu.build_module(make, inputs, version_dir, check, self.step, **options)

    def on_gpu_instances(self) -> bool:
        """Whether the model is published for GPU instances (their TorchScript graph)."""
        triton = self.spec.triton
        return triton.form == "python" and triton.instance_kind == "gpu"

    def save_tokenizer(self, transformer, files_dir: Path, max_length: int) -> Path:
        self.step("saving tokenizer")
        return module_stack.save_tokenizer(
            transformer.tokenizer, files_dir / TOKENIZER_DIR, max_length, self.do_lower_case(transformer)
        )

    @staticmethod
    def do_lower_case(transformer) -> bool:
        return bool(getattr(transformer, "do_lower_case", False))

    @staticmethod
    def reference_ids(model, texts: Sequence, **options) -> list[list[int]]:
        """Each text's (or pair's) token ids as the model's own preprocessing makes them
        (``options``: ``task``, for a route's)."""
        features = model.preprocess(list(texts), **options)
        return parity.reference_token_ids(features["input_ids"].numpy(), features["attention_mask"].numpy())

    def metadata_fields(self, model, loaded: Loaded, first: Converted) -> dict[str, Any]:
        """The fields of ModelMetadata every sentence-transformers kind fills the same way
        (the first route's where they are a route's)."""
        import sentence_transformers

        spec = self.spec
        prompts = loaded.prompts
        return {
            "kind": self.kind.name,
            "triton_name": spec.triton_name,
            "source": self.source.description,
            "library": "sentence-transformers",
            "library_version": sentence_transformers.__version__,
            "max_seq_length": first.max_seq_length,
            "do_lower_case": first.do_lower_case,
            "strip_whitespace": first.strip_whitespace,
            "parity": first.parity,
            "form": spec.triton.form,
            "max_batch_size": spec.triton.max_batch_size,
            "dynamic_batching": spec.triton.dynamic_batching,
            "instance_count": spec.triton.instance_count,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "conversion_seconds": round(time.monotonic() - self.started, 2),
            "prompts": prompts.prompts,
            "default_prompt_name": prompts.default_prompt_name,
            "prompts_refused": prompts.refused,
        }


def triton_versions(metadata: ModelMetadata) -> list[int]:
    """The Triton versions of a model's graphs: one per route Triton computes (1 without routes)."""
    if not metadata.routes:
        return [1]
    return [route.version for route in metadata.routes if route.version is not None]
