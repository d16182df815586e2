"""One GPU instance's forward, timed as the Python-backend model runs it: the model's
TorchScript graph (traced as the converter traces it, float16) through
``python_backend/torch_graphs.py``, eager and as CUDA graphs of the default buckets, from
numpy in to numpy out (padding and copies included), at a few batch shapes.

``python -m embedgate.bench.graph_forward --model-path DIR [--shapes 1x24,32x24,512x24]``

Prints a JSON report: per shape, milliseconds per call (median of ``--calls``) eager and
replayed, and the capture's time and GPU memory.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from embedgate.contract.spec import ATTENTION_MASK, GRAPH_ROWS, GRAPH_WIDTHS, INPUT_IDS
from embedgate.python_backend.torch_graphs import Buckets, GraphRunner, load_module


def _feeds(rows: int, width: int, vocab: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        INPUT_IDS: rng.integers(1000, vocab, size=(rows, width), dtype=np.int64),
        ATTENTION_MASK: np.ones((rows, width), dtype=np.int64),
    }


def _time(run, feeds, calls: int, sync) -> float:
    run(feeds)
    samples = []
    for _ in range(calls):
        sync()
        started = time.perf_counter()
        run(feeds)
        samples.append(time.perf_counter() - started)
    return round(statistics.median(samples) * 1000, 3)


def measure(args: argparse.Namespace) -> dict:
    import torch
    from sentence_transformers import SentenceTransformer

    from embedgate.converters.library import gpu

    model = SentenceTransformer(str(args.model_path), device="cpu").eval()
    names = [INPUT_IDS, ATTENTION_MASK]
    with tempfile.TemporaryDirectory() as work:
        torch_file = Path(work) / "model.pt"
        gpu.trace(model, model.preprocess(["a short text", "another text to trace"]), torch_file, torch.float16)
        module = load_module(torch, str(torch_file), "cuda")
    widths = [w for w in GRAPH_WIDTHS if w < model.max_seq_length] + [model.max_seq_length]
    rows = [r for r in GRAPH_ROWS if r <= args.max_batch_size]
    buckets = Buckets(rows, widths, args.max_tokens)
    kinds = [np.int64, np.int64]
    eager = GraphRunner(torch, module, "cuda", names, kinds, [[-1], [-1]], Buckets([], []), True, ATTENTION_MASK)
    graphs = GraphRunner(torch, module, "cuda", names, kinds, [[-1], [-1]], buckets, True, ATTENTION_MASK)
    before = torch.cuda.memory_reserved()
    with torch.jit.optimized_execution(False):
        try:
            graphs.capture()
            failure = None
        except Exception as error:  # noqa: BLE001 - reported; the eager figures still stand
            graphs.drop_graphs()
            failure = f"{type(error).__name__}: {str(error)[:500]}"
        report = {
            "capture_error": failure,
            "device": torch.cuda.get_device_name(0),
            "torch": torch.__version__,
            "graphs": len(graphs.captured),
            "capture_s": round(graphs.capture_seconds, 2),
            "gpu_memory_mib": {
                "weights": round(graphs.memory()["weights"] / 2**20, 1),
                "graphs_and_buffers": round((torch.cuda.memory_reserved() - before) / 2**20, 1),
                "total": round(torch.cuda.memory_reserved() / 2**20, 1),
            },
            "shapes": {},
        }
        vocab = model.tokenizer.vocab_size
        for shape in args.shapes.split(","):
            r, w = (int(v) for v in shape.split("x"))
            feeds = _feeds(r, w, vocab, seed=r * 1000 + w)
            eager_ms = _time(eager.run, feeds, args.calls, torch.cuda.synchronize)
            graph_ms = _time(graphs.run, feeds, args.calls, torch.cuda.synchronize)
            worst = float(
                torch.nn.functional.cosine_similarity(
                    torch.from_numpy(eager.run(feeds)), torch.from_numpy(graphs.run(feeds))
                ).min()
            )
            report["shapes"][shape] = {
                "eager_ms": eager_ms, "graph_ms": graph_ms, "speedup": round(eager_ms / graph_ms, 2),
                "rows_per_s_graph": round(r / graph_ms * 1000), "min_cosine_graph_vs_eager": round(worst, 6),
            }
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Time one GPU instance's forward, eager and as CUDA graphs.")
    parser.add_argument("--model-path", type=Path, required=True)
    parser.add_argument("--shapes", default="1x24,8x24,32x24,128x24,512x24,32x128")
    parser.add_argument("--max-batch-size", type=int, default=512)
    parser.add_argument("--max-tokens", type=int, default=65536)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    text = json.dumps(measure(args), indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
