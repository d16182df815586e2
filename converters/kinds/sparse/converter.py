"""A ``SparseEncoder``: a weight per vocabulary token.

SPLADE is a masked-language-model transformer followed by ``SpladePooling``
(``log(1 + relu(logits))``, masked, then the max or the sum over the tokens). The graph
runs both and outputs the full vector over the vocabulary; the gateway keeps the non-zero
weights (and the largest ``top_k``, or the model's own ``max_active_dims``), as
``SparseEncoder.encode`` does. Checked against ``encode``: the same non-zero weights and
cosine 0.9999, each sentence in one padded batch and alone.

An inference-free model (OpenSearch's neural sparse models) routes its queries to a
``SparseStaticEmbedding`` (a weight per vocabulary token, for each token the query has) and
its documents to SPLADE: the document route is a graph as above, the query route is
computed by the gateway from the stored weights (``static.py``), with no Triton call.
Other sparse architectures (a ``SparseAutoEncoder`` head) are refused with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as pb

from embedgate.contract.errors import UnsupportedModelError
from embedgate.contract.kinds.sparse import KIND, SparseInfo
from embedgate.contract.spec import EMBEDDING, ModelMetadata
from embedgate.converters.kinds.library import Converted, LibraryKind, Loaded, task_of, triton_versions
from embedgate.converters.kinds.sparse import static
from embedgate.converters.library import module_stack, parity
from embedgate.converters.library.routes import ModuleRoute
from embedgate.converters.triton_config import build_text_model_config

STATIC_MODULE = "SparseStaticEmbedding"


def _splade_refusal(modules) -> str | None:
    """Why a module stack is not a SPLADE model the graph reproduces, or None when it is."""
    names = [type(module).__name__ for module in modules]
    if len(names) != 2 or names[1] != "SpladePooling":
        return f"its modules are {' -> '.join(names)}; embedgate serves SPLADE (a Transformer, then SpladePooling)"
    task = getattr(modules[0], "transformer_task", "fill-mask")
    if task != "fill-mask":
        return f"its transformer's task is {task!r}, not 'fill-mask' (a masked-language-model head)"
    return None


class SparseConverter(LibraryKind):
    kind = KIND
    noun = "sparse encoder"
    serves_routes = True

    def is_static(self, route: ModuleRoute) -> bool:
        return type(route.modules[0]).__name__ == STATIC_MODULE

    def route_refusal(self, route: ModuleRoute) -> str | None:
        if self.is_static(route):
            return static.refusal(route)
        return super().route_refusal(route)

    def refusal(self, modules) -> str | None:
        return _splade_refusal(modules)

    def convert(self, directories: Sequence[Path]) -> ModelMetadata:
        (out_dir,) = directories
        loaded = self.load()
        model = loaded.model
        # The graph computes every weight; max_active_dims (the model's own top-k) is the
        # gateway's to apply, as encode() applies it after the forward pass.
        max_active_dims, model.max_active_dims = model.max_active_dims, None
        converted, routes = self.convert_routes(loaded, out_dir, lambda *route: self._route(loaded, *route))
        dims = {result.extras["dim"] for result in converted}
        if len(dims) > 1:
            raise UnsupportedModelError(f"unsupported sparse encoder: its routes have vocabularies of {sorted(dims)}")
        splade = next(route for route in loaded.routes if not self.is_static(route))
        pooling = splade.modules[-1]
        first = converted[0]
        return ModelMetadata(
            **self.metadata_fields(model, loaded, first),
            model_name=self.spec.model_name,
            embedding_dim=first.extras["dim"],
            normalized=False,
            gpu=next((result.extras["gpu"] for result in converted if result.extras.get("gpu")), None),
            routes=routes,
            record=SparseInfo(
                max_active_dims=max_active_dims,
                pooling=str(pooling.pooling_strategy),
                activation=str(pooling.activation_function),
            ),
        )

    def _route(self, loaded: Loaded, route: ModuleRoute, version_dir: Path | None, files_dir: Path) -> Converted:
        model = loaded.model
        if version_dir is None:
            return static.convert(model, route, files_dir, self.spec.parity_threshold, self.step)
        spec, step = self.spec, self.step
        transformer = module_stack.text_transformer(route.modules)
        max_length = self.max_length(model, route.modules)
        sentences = parity.parity_sentences(max_length)

        step("computing reference sparse vectors with sentence-transformers")
        expected_ids = self.reference_ids(model, sentences, **task_of(route))
        reference = model.encode(sentences, prompt="", convert_to_sparse_tensor=False, **task_of(route))
        reference = reference.float().numpy()
        exported = self.export_route(model, route, version_dir, files_dir, sentences, expected_ids, max_length)
        token_ids = exported.token_ids
        run = parity.onnx_runner(exported.onnx_file)
        result = parity.check_sparse(run, token_ids, reference, spec.parity_threshold)
        step(f"parity passed: the same non-zero weights, min cosine {result.min_cosine:.6f}")
        gpu = self.gpu_graph(
            route.modules,
            exported.example,
            version_dir,
            # Which weights are zero is what a sparse vector is: float16 is not tried.
            lambda run, half: parity.check_sparse(run, token_ids, reference, spec.parity_threshold),
            half=False,
            zero_token_types=exported.zero_token_types,
        )
        return Converted(
            max_seq_length=max_length,
            strip_whitespace=exported.strip_whitespace,
            parity=result,
            do_lower_case=self.do_lower_case(transformer),
            extras={"dim": int(reference.shape[1]), "gpu": gpu},
        )

    def configs(self, metadata: ModelMetadata) -> list[pb.ModelConfig]:
        return [
            build_text_model_config(
                self.spec.triton_name, EMBEDDING, metadata.embedding_dim, self.spec.triton,
                versions=triton_versions(metadata), max_width=metadata.max_seq_length,
            )
        ]
