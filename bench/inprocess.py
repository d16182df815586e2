"""The physical limit: the very ONNX file the server serves, run in this process.

The model is opened from the model repository as Triton's ``model.py`` opens it (the
file named in ``config.pbtxt``, full graph optimization) but with the whole machine to
itself: onnxruntime's own thread defaults, whatever the server's instances use, since the
limit is what the bare model can do here. Texts are tokenized exactly as the gateway
tokenizes them (:class:`TextTokenizer` with the model's metadata). Nothing stands between
the texts and onnxruntime, so what the server reaches is measured as a fraction of this.

Two ways of batching the same texts:

- ``plain``: batches of ``batch_size`` in arrival order, each padded to its longest text;
- ``length_sorted``: all texts sorted by token count and then cut into batches, so each
  batch holds texts of nearly one length and little padding is computed (the best
  batching an offline job can do; a server sees its inputs a few at a time).

Both are timed from raw text to embeddings, tokenization included, as the server's are.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from embedgate.api.models.names import to_triton_name
from embedgate.contract.preprocess.text import TextTokenizer, TokenBatch
from embedgate.contract.spec import (
    ATTENTION_MASK,
    EMBEDDING,
    INPUT_IDS,
    METADATA_FILE,
    ONNX_FILE,
    TOKENIZER_DIR,
    ModelMetadata,
)

STRATEGIES = ("plain", "length_sorted")
CONFIG_FILE = "config.pbtxt"


@dataclass
class LocalModel:
    onnx_path: Path
    metadata: ModelMetadata
    tokenizer: TextTokenizer
    session: object  # onnxruntime.InferenceSession
    intra_op_threads: int


def _config_parameters(model_dir: Path) -> dict[str, str]:
    from embedgate.converters.triton_config import parse

    try:
        config = parse((model_dir / CONFIG_FILE).read_text())
    except OSError:
        return {}
    return {key: value.string_value for key, value in config.parameters.items()}


def open_local_model(repository: Path, model: str, intra_op_threads: int | None = None) -> LocalModel:
    """Open ``model`` from ``repository``; ``intra_op_threads`` None means onnxruntime's
    default (every core)."""
    import onnxruntime as ort

    model_dir = repository / to_triton_name(model)
    metadata_path = model_dir / METADATA_FILE
    if not metadata_path.is_file():
        raise FileNotFoundError(
            f"{metadata_path} not found: load the model into the server (or point "
            "--model-repository at the server's repository) first"
        )
    metadata = ModelMetadata.model_validate_json(metadata_path.read_bytes())
    if metadata.kind != "sentence_transformer":
        raise ValueError(f"the in-process baseline covers text models; {model} is a {metadata.kind} model")
    parameters = _config_parameters(model_dir)
    onnx_path = model_dir / "1" / (parameters.get("onnx_file") or ONNX_FILE)
    threads = intra_op_threads or 0
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(onnx_path), sess_options=options, providers=["CPUExecutionProvider"])
    tokenizer = TextTokenizer(
        model_dir / TOKENIZER_DIR / "tokenizer.json", metadata.max_seq_length, metadata.strip_whitespace
    )
    return LocalModel(onnx_path, metadata, tokenizer, session, threads)


def plan_batches(token_counts: list[int], batch_size: int, by_length: bool) -> list[np.ndarray]:
    """Indices of the texts in each batch: arrival order, or sorted by token count."""
    order = np.argsort(token_counts, kind="stable") if by_length else np.arange(len(token_counts))
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def padding_efficiency(token_counts: list[int], batches: list[np.ndarray]) -> float:
    """Real tokens over computed tokens (each batch is computed at its longest length)."""
    counts = np.asarray(token_counts)
    computed = sum(len(rows) * int(counts[rows].max()) for rows in batches if len(rows))
    return float(counts.sum() / computed) if computed else 1.0


@dataclass(frozen=True)
class BaselineResult:
    strategy: str
    texts: int
    batches: int
    batch_size: int
    seconds: float
    tokenize_s: float
    infer_s: float
    padding_efficiency: float

    @property
    def embeddings_per_s(self) -> float:
        return self.texts / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict:
        return {
            "strategy": self.strategy,
            "texts": self.texts,
            "batches": self.batches,
            "batch_size": self.batch_size,
            "seconds": round(self.seconds, 4),
            "tokenize_s": round(self.tokenize_s, 4),
            "infer_s": round(self.infer_s, 4),
            "embeddings_per_s": round(self.embeddings_per_s, 2),
            "padding_efficiency": round(self.padding_efficiency, 4),
        }


def _gather(chunks: list[TokenBatch], rows: np.ndarray, chunk_size: int) -> tuple[np.ndarray, np.ndarray]:
    """One batch of the texts ``rows`` (indices over all chunks), padded to its longest."""
    counts = [chunks[i // chunk_size].token_counts[i % chunk_size] for i in rows]
    input_ids = np.zeros((len(rows), max(counts)), dtype=np.int64)
    attention_mask = np.zeros_like(input_ids)
    for out, (i, n) in enumerate(zip(rows, counts)):
        input_ids[out, :n] = chunks[i // chunk_size].input_ids[i % chunk_size, :n]
        attention_mask[out, :n] = 1
    return input_ids, attention_mask


def embed(model: LocalModel, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    (vectors,) = model.session.run([EMBEDDING], {INPUT_IDS: input_ids, ATTENTION_MASK: attention_mask})
    return vectors


def run_baseline(model: LocalModel, texts: list[str], strategy: str, batch_size: int = 32) -> BaselineResult:
    """Embed ``texts`` with ``strategy``; returns its timings (the embeddings are dropped)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}")
    if not texts:
        raise ValueError("no texts to embed")
    tokenize_s = infer_s = 0.0
    started = time.perf_counter()
    if strategy == "plain":
        # Tokenize each batch as it "arrives", as a server must.
        counts: list[int] = []
        batches = 0
        for start in range(0, len(texts), batch_size):
            t0 = time.perf_counter()
            tokens = model.tokenizer.encode(texts[start : start + batch_size])
            t1 = time.perf_counter()
            embed(model, tokens.input_ids, tokens.attention_mask)
            tokenize_s += t1 - t0
            infer_s += time.perf_counter() - t1
            counts.extend(tokens.token_counts)
            batches += 1
        efficiency = padding_efficiency(counts, plan_batches(counts, batch_size, by_length=False))
    else:
        # Lengths are known only after tokenizing, so tokenize everything first.
        t0 = time.perf_counter()
        chunks = [model.tokenizer.encode(texts[s : s + batch_size]) for s in range(0, len(texts), batch_size)]
        counts = [n for chunk in chunks for n in chunk.token_counts]
        plan = plan_batches(counts, batch_size, by_length=True)
        tokenize_s += time.perf_counter() - t0
        for rows in plan:
            t0 = time.perf_counter()
            input_ids, attention_mask = _gather(chunks, rows, batch_size)
            t1 = time.perf_counter()
            embed(model, input_ids, attention_mask)
            tokenize_s += t1 - t0
            infer_s += time.perf_counter() - t1
        batches = len(plan)
        efficiency = padding_efficiency(counts, plan)
    seconds = time.perf_counter() - started
    return BaselineResult(strategy, len(texts), batches, batch_size, seconds, tokenize_s, infer_s, efficiency)


def bracketed(before: dict, after: dict) -> dict:
    """One baseline from a run before the server's and one after (``as_dict`` forms): the
    mean rate, with both runs kept, so a reader sees how far the machine drifted."""
    rates = [before["embeddings_per_s"], after["embeddings_per_s"]]
    return {**after, "embeddings_per_s": round(sum(rates) / 2, 2), "runs_embeddings_per_s": rates}


def warm_up(model: LocalModel, texts: list[str], batch_size: int = 32) -> None:
    """One untimed batch: onnxruntime allocates and plans on its first runs."""
    tokens = model.tokenizer.encode(texts[:batch_size])
    embed(model, tokens.input_ids, tokens.attention_mask)
