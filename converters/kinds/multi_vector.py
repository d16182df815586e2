"""A ``MultiVectorEncoder`` (ColBERT-style late interaction): a vector per token.

The graph runs the module stack but ``MultiVectorMask`` (Transformer, a token-level Dense,
Normalize) and gives every position's vector; which positions a text keeps, how a query is
expanded (``[MASK]`` up to the expansion length) and how long each task's texts may be are
the tokenization's, which the gateway does per task (``contract/preprocess/multi_vector.py``)
with what is recorded here. Checked for each task against ``encode_query``,
``encode_document`` and ``encode`` (each with the prompt it applies: ColBERT's ``[Q]`` and
``[D]`` markers): the same tokens kept, every token vector at cosine 0.9999, one padded batch
and alone, and MaxSim of the queries against the documents within ``score_tolerance`` of
the library's.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2 as pb

from embedgate.contract.errors import ParityError, UnsupportedModelError
from embedgate.contract.kinds.multi_vector import KIND, MultiVectorInfo, MultiVectorTask, QueryExpansion
from embedgate.contract.spec import (
    ATTENTION_MASK,
    INPUT_IDS,
    ONNX_FILE,
    TOKEN_EMBEDDINGS,
    ModelMetadata,
    ParityResult,
)
from embedgate.converters.kinds.library import Converted, LibraryKind
from embedgate.converters.library import module_stack, parity
from embedgate.converters.triton_config import build_text_model_config

MASK = "MultiVectorMask"
# Modules that work on token vectors without reading which tokens are scored.
_TOKEN_MODULES = {"Dense", "Normalize"}
# How each task is asked of the library: encode_query, encode_document, encode.
TASKS = {"query": "query", "document": "document", "default": None}


def _multi_vector_refusal(modules) -> str | None:
    names = [type(module).__name__ for module in modules]
    if names.count(MASK) != 1:
        return f"its modules are {' -> '.join(names)}; embedgate serves a Transformer, token-level Dense and " \
               "Normalize modules and one MultiVectorMask"
    others = sorted(set(names[1:]) - _TOKEN_MODULES - {MASK})
    if others:
        return f"its modules include {', '.join(others)} (token pooling or others); embedgate serves a Transformer, " \
               "token-level Dense and Normalize modules and a MultiVectorMask"
    transformer = modules[0]
    if getattr(transformer, "transformer_task", "feature-extraction") != "feature-extraction":
        return f"its transformer's task is {transformer.transformer_task!r} (an image retriever); embedgate serves text"
    if "message" in getattr(transformer, "modality_config", {}):
        return "its transformer renders texts through a chat template; embedgate serves plain text"
    return None


class MultiVectorConverter(LibraryKind):
    kind = KIND
    noun = "multi-vector encoder"

    def refusal(self, modules) -> str | None:
        return _multi_vector_refusal(modules)

    def convert(self, directories: Sequence[Path]) -> ModelMetadata:
        (out_dir,) = directories
        spec, step = self.spec, self.step
        loaded = self.load()
        model, transformer = loaded.model, loaded.transformer
        modules = loaded.routes[0].modules
        max_length = self.max_length(model, modules)
        info = MultiVectorInfo(
            similarity=model.similarity_fn_name,
            **{name: _task(model, transformer, modules, task, max_length) for name, task in TASKS.items()},
        )
        graph = [module for module in modules if type(module).__name__ != MASK]
        sentences = parity.parity_sentences(max_length)
        zero_token_types = module_stack.takes_token_type_ids(transformer)

        onnx_file = out_dir / "1" / ONNX_FILE
        example = model.preprocess(sentences[:2])
        step(f"exporting ONNX (opset {module_stack.OPSET})")
        module_stack.export(
            graph, example, onnx_file, zero_token_types=zero_token_types,
            output_key="token_embeddings", output_name=TOKEN_EMBEDDINGS,
        )
        tokenizer_file = self.save_tokenizer(transformer, out_dir, max_length)
        # Whether texts are stripped is the model's, whatever the task (read at its own length).
        strip, _ = parity.check_tokenization(tokenizer_file, sentences, self.reference_ids(model, sentences))
        references = {}
        for name, task in TASKS.items():
            prompted = [_prompt(model, task) + sentence for sentence in sentences]
            references[name] = (prompted, model.encode(prompted, task=task, prompt="", convert_to_numpy=True))
        library = model.similarity(list(references["query"][1]), list(references["document"][1])).float().cpu().numpy()

        def check(run) -> ParityResult:
            """Every task's kept token vectors, then MaxSim of the queries against the documents."""
            served, results = {}, []
            for name, (prompted, reference) in references.items():
                step(f"parity check of the {name} task on {len(prompted)} sentences")
                served[name], result = _check_task(
                    run, tokenizer_file, getattr(info, name), strip, prompted, reference, spec.parity_threshold
                )
                results.append(result)
            error = _maxsim_error(served["query"], served["document"], library, info.similarity == "meanmaxsim")
            if error > spec.score_tolerance:
                raise ParityError(f"parity check failed: a MaxSim score differs from the library's by {error:.6g}")
            return ParityResult(
                passed=True,
                threshold=spec.parity_threshold,
                min_cosine=min(result.min_cosine for result in results),
                mean_cosine=float(np.mean([result.mean_cosine for result in results])),
                sentences=len(sentences),
                max_abs_error=error,
            )

        result = check(parity.onnx_runner(onnx_file, TOKEN_EMBEDDINGS))
        step(f"parity passed: min token cosine {result.min_cosine:.6f}, MaxSim within {result.max_abs_error:.3g}")
        gpu = self.gpu_graph(
            graph, example, out_dir / "1", lambda run, half: check(run),
            half=False, zero_token_types=zero_token_types, output_key="token_embeddings",
        )
        return ModelMetadata(
            **self.metadata_fields(
                model, loaded, Converted(max_length, strip, result, self.do_lower_case(transformer))
            ),
            model_name=spec.model_name,
            embedding_dim=int(references["query"][1][0].shape[1]),
            normalized=any(type(module).__name__ == "Normalize" for module in modules),
            record=info,
            gpu=gpu,
        )

    def configs(self, metadata: ModelMetadata) -> list[pb.ModelConfig]:
        info = metadata.record_of(MultiVectorInfo)
        assert info is not None
        expansion = info.query.expansion
        # Expansion positions the encoder does not attend to have mask 0 but are computed:
        # a row is not cut at its mask then.
        reaches_past_mask = expansion is not None and not expansion.attend
        return [
            build_text_model_config(
                self.spec.triton_name, TOKEN_EMBEDDINGS, metadata.embedding_dim, self.spec.triton,
                per_token=True, length_input=None if reaches_past_mask else ATTENTION_MASK,
                max_width=metadata.max_seq_length,
            )
        ]


def _task(model, transformer, modules, task: str | None, max_length: int) -> MultiVectorTask:
    """How ``task``'s texts are tokenized and which of their tokens are scored, read from the
    Transformer's per-task lengths and query expansion and from MultiVectorMask."""
    mask = next(module for module in modules if type(module).__name__ == MASK)
    expansion = transformer.query_expansion if task == "query" else None
    length = {"query": transformer.query_length, "document": transformer.document_length}.get(task) or max_length
    found = None
    if expansion is not None:
        tokenizer = transformer.tokenizer
        token = expansion.get("token")
        token_id = tokenizer.convert_tokens_to_ids(token) if token is not None else tokenizer.mask_token_id
        if token_id is None:
            token_id = tokenizer.eos_token_id
        if token_id is None:
            raise UnsupportedModelError(
                "unsupported multi-vector encoder: its query expansion has no token to expand with"
            )
        found = QueryExpansion(
            strategy=expansion["strategy"], attend=bool(expansion.get("attend")), token_id=int(token_id),
            length=int(expansion["length"]),
        )
        if found.strategy == "fixed":
            length = found.length
        elif transformer.query_length is not None:
            length = max(length, found.length)
    skip = mask._skiplist_ids
    skipped = (task or "document") in mask.skiplist_tasks and skip is not None
    keep = mask.keep_only_token_ids if task != "query" and mask.keep_only_token_ids else None
    return MultiVectorTask(
        max_length=int(length),
        expansion=found,
        skiplist=sorted(int(i) for i in skip.tolist()) if skipped else [],
        keep_only=[int(i) for i in keep] if keep else None,
    )


def _prompt(model, task: str | None) -> str:
    """The prompt ``encode_query`` / ``encode_document`` / ``encode`` puts before each text
    when none is asked for: the task's own prompt, else the model's default one."""
    prompts = model.prompts or {}
    candidates = {"query": ("query",), "document": ("document", "passage", "corpus")}.get(task, ())
    name = next((name for name in candidates if name in prompts), model.default_prompt_name)
    return (prompts.get(name) or "") if name is not None else ""


def _maxsim_error(queries: list[np.ndarray], documents: list[np.ndarray], library: np.ndarray, mean: bool) -> float:
    """The largest difference between MaxSim of the served vectors and the library's scores."""
    import torch
    from sentence_transformers.util import maxsim

    def tensors(rows):
        return [torch.from_numpy(np.ascontiguousarray(row)) for row in rows]

    ours = maxsim(tensors(queries), tensors(documents), length_normalize=mean).float().cpu().numpy()
    return float(np.abs(ours - library).max())


def _check_task(run, tokenizer_file: Path, task: MultiVectorTask, strip: bool, texts, reference, threshold):
    """The gateway's tokenization and kept vectors of ``texts`` for one task against the
    library's (``reference``: one [tokens, dim] array per text), in a batch and alone."""
    from embedgate.contract.preprocess.multi_vector import MultiVectorTokenizer

    tokenizer = MultiVectorTokenizer(tokenizer_file, task, strip)

    def vectors(batch_texts) -> list[np.ndarray]:
        batch = tokenizer.encode(batch_texts)
        outputs = run({INPUT_IDS: batch.input_ids, ATTENTION_MASK: batch.attention_mask})
        return [row[kept] for row, kept in zip(outputs, batch.scored)]

    batched = vectors(texts)
    alone = [row for text in texts for row in vectors([text])]
    cosines = []
    for name, rows in (("as one padded batch", batched), ("one sentence at a time", alone)):
        for index, (ours, theirs) in enumerate(zip(rows, reference)):
            if ours.shape != theirs.shape:
                raise ParityError(
                    f"parity check failed: sentence {index + 1} keeps {len(ours)} token vectors, the library "
                    f"{len(theirs)} ({name})"
                )
            values = parity.cosines(ours, theirs)
            if len(values) and values.min() < threshold:
                raise ParityError(
                    f"parity check failed: min token cosine {values.min():.6f} < threshold {threshold} "
                    f"(sentence {index + 1}, token {int(values.argmin()) + 1}, {name})"
                )
            cosines.extend(values.tolist())
    result = ParityResult(
        passed=True, threshold=threshold, min_cosine=float(min(cosines)), mean_cosine=float(np.mean(cosines)),
        sentences=len(texts),
    )
    return batched, result
