"""A ``SentenceTransformer``: dense text embeddings.

The exported graph takes ``input_ids`` and ``attention_mask`` and runs the whole module
stack (Transformer, Pooling, Dense, Normalize...), so pooling and normalization happen
inside Triton and the gateway only tokenizes. Checked against ``SentenceTransformer.encode``
(cosine, each sentence in one padded batch and alone); a model with mean pooling also gets
the packed graph for short texts (``packed.py``), and load-time variants (``@optimized``,
``@int8``) are built from the same export (``variants.py``). Ranges for int8/uint8 outputs
are calibrated here, once (``converters/calibration.py``).

A model with a Router (``Router.for_query_document``: different modules for queries and
documents) has each route converted on its own, as a Triton version of its own, and checked
against ``encode`` with that route's task (``encode_query``'s, ``encode_document``'s).

A static embedding model (a ``StaticEmbedding``, then perhaps Normalize) has no graph: the
gateway computes it from its stored vectors (``static.py``), and a model of such routes only
has no Triton model at all. A Pooling that leaves a prompt's tokens out pools around the
tokens the gateway marks as the prompt's (``prompt_exclusion.py``).

Where the conversion asks for it (``late_chunking``), a model with mean pooling also gets
its late-chunking graph, a Triton model of its own (``late.py``); one that cannot have it
is published without it, and its record says why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as pb

from embedgate.contract.errors import ConversionError, UnsupportedModelError
from embedgate.contract.kinds.dense import KIND, DenseInfo, LateChunking, PromptExclusion, late_part_name
from embedgate.contract.spec import CHUNK_EMBEDDINGS, EMBEDDING, ModelMetadata, variant_model_name
from embedgate.converters import calibration
from embedgate.converters.kinds.dense import late, packed, prompt_exclusion, static, variants
from embedgate.converters.kinds.library import Converted, Exported, LibraryKind, Loaded, task_of, triton_versions
from embedgate.converters.library import module_stack, parity
from embedgate.converters.library.routes import ModuleRoute
from embedgate.converters.triton_config import build_text_model_config


class DenseConverter(LibraryKind):
    kind = KIND
    noun = "sentence-transformer"
    serves_routes = True
    serves_variants = True
    serves_gateway_only = True
    # Where the late-chunking graph goes (its part's version directory), when asked for.
    late_dir: Path | None = None

    def is_static(self, route: ModuleRoute) -> bool:
        return static.is_static(route)

    def route_refusal(self, route: ModuleRoute) -> str | None:
        if self.is_static(route):
            return static.refusal(route)
        return super().route_refusal(route)

    def prompt_exclusion_refusal(self, routes: list[ModuleRoute]) -> str | None:
        return prompt_exclusion.refusal(routes)

    def parts(self) -> tuple[str, ...]:
        name = self.spec.triton_name
        return (name, late_part_name(name)) if self.spec.late_chunking else (name,)

    def published_parts(self, metadata: ModelMetadata) -> tuple[str, ...]:
        record = metadata.record_of(DenseInfo)
        return self.parts() if record is not None and record.late_chunking is not None else self.parts()[:1]

    def convert(self, directories: Sequence[Path]) -> ModelMetadata:
        out_dir, *late_dir = directories
        self.late_dir = late_dir[0] / "1" if late_dir else None
        spec = self.spec
        loaded = self.load()
        if spec.variant is not None and loaded.routes[0].name:
            raise UnsupportedModelError(
                f"unsupported variant '@{spec.variant}': the model has a Router (a graph per route); "
                "load the model itself"
            )
        if spec.variant is not None and any(self.is_static(route) for route in loaded.routes):
            raise UnsupportedModelError(
                f"unsupported variant '@{spec.variant}': the model is static embeddings, computed by the gateway "
                "with no graph to vary; load the model itself"
            )
        model = loaded.model
        converted, routes = self.convert_routes(
            loaded, out_dir, lambda route, version_dir, files_dir: self._route(loaded, route, version_dir, files_dir)
        )
        first = converted[0]
        # One set of ranges for every route: the default route's vectors (a routed model's
        # queries and documents share one space).
        calibrated = calibration.calibrate(
            model.encode(calibration.calibration_texts(), convert_to_numpy=True, prompt="", **task_of(loaded.routes[0]))
        )
        dims = {result.extras["dim"] for result in converted}
        if len(dims) > 1:
            raise UnsupportedModelError(
                f"unsupported sentence-transformer: its routes give embeddings of different sizes ({sorted(dims)})"
            )
        return ModelMetadata(
            **self.metadata_fields(model, loaded, first),
            model_name=variant_model_name(spec.model_name, spec.variant),
            embedding_dim=first.extras["dim"],
            normalized=all(result.extras["normalized"] for result in converted),
            variant=first.extras["variant"],
            packed_parity=first.extras["packed_parity"],
            calibration=calibrated,
            gpu=first.extras["gpu"],
            routes=routes,
            record=self._record(loaded, first),
        )

    def _record(self, loaded: Loaded, first: Converted) -> DenseInfo | None:
        """Its prompts' pooling and its late-chunking graph (or why it has none), where either is news."""
        exclusion = first.extras.get("prompt_exclusion") if loaded.prompts.excluded else None
        chunking, refusal = first.extras.get("late", (None, None))
        if self.late_dir is not None and chunking is None and refusal is None:
            refusal = "static embeddings: each token's vector is its own, with no context to carry"
        if exclusion is None and chunking is None and refusal is None:
            return None
        return DenseInfo(prompt_exclusion=exclusion, late_chunking=chunking, late_chunking_refusal=refusal)

    def _late(
        self, route: ModuleRoute, exported: Exported, sentences: list[str], model
    ) -> tuple[LateChunking | None, str | None]:
        """The late-chunking graph of the first route, built and checked; or why not (the
        model is served without it: its own graph passed)."""
        if self.spec.variant is not None:
            return None, f"late chunking runs the model itself, not its '@{self.spec.variant}' variant"
        reason = late.refusal(route.modules, routed=bool(route.name))
        if reason is not None:
            self.step(f"no late-chunking graph: {reason}")
            return None, reason
        self.step("exporting the late-chunking graph")
        try:
            result = late.build(
                model, exported.zero_token_types, exported.example, self.late_dir, exported.token_ids, sentences,
                self.spec.parity_threshold,
            )
        except (ConversionError, RuntimeError, ValueError) as error:  # onnxruntime's failures are RuntimeErrors
            reason = str(error) if isinstance(error, ConversionError) else f"its export failed: {error}"
            self.step(f"no late-chunking graph: {reason}")
            return None, reason
        self.step(f"late-chunking parity passed: min cosine {result.parity.min_cosine:.6f}")
        return result, None

    def _route(self, loaded: Loaded, route: ModuleRoute, version_dir: Path | None, files_dir: Path) -> Converted:
        spec, step, model = self.spec, self.step, loaded.model
        if version_dir is None:
            return static.convert(model, route, files_dir, spec.parity_threshold, step)
        modules = route.modules
        transformer = module_stack.text_transformer(modules)
        max_length = self.max_length(model, modules)
        sentences = parity.parity_sentences(max_length)

        step("computing reference embeddings with sentence-transformers")
        expected_ids = self.reference_ids(model, sentences, **task_of(route))
        # The graph embeds the texts it is given; the gateway prepends any prompt, the default
        # one included. prompt="" keeps encode() from applying the default here.
        reference = model.encode(sentences, convert_to_numpy=True, prompt="", **task_of(route))
        if spec.variant is not None:
            variants.prepare_export(model)
        exported = self.export_route(model, route, version_dir, files_dir, sentences, expected_ids, max_length)
        token_ids = exported.token_ids
        variant = None
        if spec.variant is None:
            result = parity.check_embeddings(exported.onnx_file, token_ids, reference, spec.parity_threshold)
        else:
            result, variant = variants.build(
                spec, model, version_dir.parent, exported.onnx_file, token_ids, reference, step
            )
        step(f"parity passed: min cosine {result.min_cosine:.6f}")
        with_prompts = self._prompt_exclusion(loaded, transformer, exported, max_length)
        exclusion = None
        if with_prompts is not None:
            step("parity check with prompts left out of pooling")
            exclusion = with_prompts(parity.onnx_runner(exported.onnx_file), spec.parity_threshold)
            step(f"parity passed with prompts: min cosine {exclusion.parity.min_cosine:.6f}")

        def gpu_check(run, half: bool):
            threshold = spec.half_parity_threshold if half else spec.parity_threshold
            checked = parity.check_run(run, token_ids, reference, threshold)
            if with_prompts is not None:
                with_prompts(run, threshold)
            return checked

        needs_token_type_ids = exported.zero_token_types
        gpu = self.gpu_graph(
            modules, exported.example, version_dir, gpu_check, half=spec.gpu_float16, zero_token_types=needs_token_type_ids
        )
        packed_parity = None
        if spec.variant is None and gpu is None and spec.triton.form == "python" and spec.triton.pack_width > 0:
            step("exporting the packed graph for short texts")
            packed_parity, outcome = packed.build(
                modules, needs_token_type_ids, version_dir, token_ids, reference, spec.parity_threshold,
                spec.triton.pack_width,
            )
            step(outcome)
        chunking = None
        if self.late_dir is not None and route is loaded.routes[0]:
            chunking = self._late(route, exported, sentences, model)
        return Converted(
            max_seq_length=max_length,
            strip_whitespace=exported.strip_whitespace,
            parity=result,
            do_lower_case=self.do_lower_case(transformer),
            extras={
                "dim": int(reference.shape[1]),
                "normalized": any(type(module).__name__ == "Normalize" for module in modules),
                "variant": variant,
                "packed_parity": packed_parity,
                "gpu": gpu,
                "prompt_exclusion": exclusion,
                **({"late": chunking} if chunking is not None else {}),
            },
        )

    def _prompt_exclusion(
        self, loaded: Loaded, transformer, exported: Exported, max_length: int
    ) -> Callable[[parity.Run, float], PromptExclusion] | None:
        """Where the Pooling leaves a prompt's tokens out: the check of a graph with the
        gateway's prompt marks against ``encode(prompt=...)`` (None where it takes them)."""
        if not loaded.prompts.excluded:
            return None
        special_ids = prompt_exclusion.special_ids(transformer)
        prompts = loaded.prompts.prompts.values()

        def check(run: parity.Run, threshold: float) -> PromptExclusion:
            return prompt_exclusion.check(
                loaded.model, run, exported.tokenizer_file, max_length, exported.strip_whitespace, special_ids,
                prompts, threshold,
            )

        return check

    def configs(self, metadata: ModelMetadata) -> list[pb.ModelConfig]:
        versions = triton_versions(metadata)
        if not versions:
            return []  # static embeddings: the gateway computes every route
        configs = [
            build_text_model_config(
                self.spec.triton_name, EMBEDDING, metadata.embedding_dim, self.spec.triton,
                versions=versions, max_width=metadata.max_seq_length,
            )
        ]
        if len(self.published_parts(metadata)) > 1:
            # onnxruntime on CPU instances, on any host: there is no GPU graph of it.
            options = self.spec.triton.model_copy(update={"instance_kind": "cpu", "pack_width": 0})
            configs.append(build_text_model_config(
                late_part_name(self.spec.triton_name), CHUNK_EMBEDDINGS, metadata.embedding_dim, options,
                late.LATE_INPUTS, per_token=True,
            ))
        return configs
