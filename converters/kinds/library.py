"""What the converters of sentence-transformers' three classes share: the model loaded as
the class its directory declares, checked to be a text model the gateway can tokenize
for, its tokenizer saved and checked, and the metadata every one of them records."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar

from embedgate.converters.library import gpu, module_stack, parity
from embedgate.converters.library.declared import Declared
from embedgate.converters.errors import UnsupportedModelError
from embedgate.converters.library.module_stack import Source
from embedgate.converters.library.prompts import Prompts, read_prompts
from embedgate.converters.spec import TOKENIZER_DIR, ConversionSpec, GpuInfo

from embedgate.converters.kinds.base import KindConverter, Step


class LibraryKind(KindConverter):
    """A sentence-transformers model of class ``model_class``: one Triton model, a text
    graph over the module stack, the tokenizer beside it."""

    model_class: ClassVar[str]
    # For messages: "unsupported cross-encoder: ...".
    noun: ClassVar[str]

    def __init__(self, spec: ConversionSpec, step: Step, source: Source, declared: Declared):
        super().__init__(spec, step)
        self.source = source
        self.declared = declared
        self.started = time.monotonic()

    def load(self):
        """The model, its Transformer module, its prompts and its max length, refused if the
        gateway could not serve it exactly."""
        self.step(f"loading model as a {self.model_class} from {self.source.description}")
        model = module_stack.load(self.model_class, self.source, self.spec)
        # First: a Router is refused for what it is, whatever module comes first.
        reason = module_stack.routed(model)
        if reason is not None:
            raise UnsupportedModelError(f"unsupported {self.noun}: {reason}")
        transformer = module_stack.text_transformer(model)
        reason = self.refusal(model)
        if reason is not None:
            raise UnsupportedModelError(f"unsupported {self.noun}: {reason}")
        # Before any export: a default prompt the graph cannot apply refuses the conversion.
        prompts = read_prompts(model)
        return model, transformer, prompts, module_stack.checked_max_length(self.max_length(model))

    def gpu_graph(self, model, example: dict, out_dir: Path, check: gpu.Check, **options) -> GpuInfo | None:
        """The TorchScript graph of GPU instances (``converters/library/gpu.py``), where the model
        is published for them; None for CPU instances."""
        triton = self.spec.triton
        if triton.form != "python" or triton.instance_kind != "gpu":
            return None
        return gpu.build(model, example, out_dir, check, self.step, **options)

    def refusal(self, model) -> str | None:
        """Why ``model`` cannot be served exactly as this kind, or None."""
        return None

    def max_length(self, model) -> int | None:
        return model.max_seq_length

    def save_tokenizer(self, transformer, out_dir: Path, max_length: int) -> Path:
        self.step("saving tokenizer")
        return module_stack.save_tokenizer(
            transformer.tokenizer, out_dir / TOKENIZER_DIR, max_length, self.do_lower_case(transformer)
        )

    @staticmethod
    def do_lower_case(transformer) -> bool:
        return bool(getattr(transformer, "do_lower_case", False))

    @staticmethod
    def reference_ids(model, texts: Sequence) -> list[list[int]]:
        """Each text's (or pair's) token ids as the model's own preprocessing makes them."""
        features = model.preprocess(list(texts))
        return parity.reference_token_ids(features["input_ids"].numpy(), features["attention_mask"].numpy())

    def metadata_fields(self, model, transformer, prompts: Prompts, max_length: int) -> dict[str, Any]:
        """The fields of ModelMetadata every sentence-transformers kind fills the same way."""
        import sentence_transformers

        spec = self.spec
        return {
            "kind": self.kind,
            "triton_name": spec.triton_name,
            "source": self.source.description,
            "library": "sentence-transformers",
            "library_version": sentence_transformers.__version__,
            "max_seq_length": max_length,
            "do_lower_case": self.do_lower_case(transformer),
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
