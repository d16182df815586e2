"""The in-process reference on an accelerator: the model's own library, in this process.

``python -m embedgate.bench.torch_reference --model-path DIR --device cuda``: the
sentence-transformers model in ``DIR`` (float16 by default) embeds the inputs a benchmark
run sends (the same payload and seed), with nothing between the texts and PyTorch:

- throughput: all inputs through ``SentenceTransformer.encode``, which sorts texts by
  length before cutting batches (the best batching an offline job gets), at each
  ``--batch-sizes`` value; tokenization included, as the server's is;
- latency: one call at a time of one request's inputs (``--payload``), p50 and p99;
- the forward limit (``--forward-batch-sizes``): the same texts tokenized beforehand,
  sorted by length, through the model's forward alone at each batch size, tokenization
  and copies out excluded: what the GPU itself can embed, the ceiling a server is put
  against.

Prints a JSON report (also written to ``--json``), the figure server runs are put against.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from embedgate.bench.payloads import build_payload
from embedgate.bench.report import describe, print_json


def measure(args: argparse.Namespace) -> dict:
    import torch
    from sentence_transformers import SentenceTransformer

    dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[args.dtype]
    model = SentenceTransformer(str(args.model_path), device=args.device, model_kwargs={"torch_dtype": dtype})
    model.eval()
    payload = build_payload(args.payload, batch_size=args.per_request, seed=args.seed)
    texts = [text for index in range(args.requests) for text in payload.inputs(index)]

    def sync() -> None:
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    throughput = {}
    for batch_size in args.batch_sizes:
        # Every batch once, untimed, as a server running for a while has seen its shapes:
        # warmed up on 512 texts only, encode on an H100 took 40 ms a batch of 256 short
        # texts, each new padded length paying for its kernels' choice.
        model.encode(texts, batch_size=batch_size, convert_to_numpy=True)
        sync()
        started = time.perf_counter()
        model.encode(texts, batch_size=batch_size, convert_to_numpy=True)
        sync()
        seconds = time.perf_counter() - started
        throughput[str(batch_size)] = {"seconds": round(seconds, 4), "embeddings_per_s": round(len(texts) / seconds, 2)}

    forward = _forward_limit(torch, model, texts, args.forward_batch_sizes, sync)

    latencies = []
    for index in range(args.latency_calls):  # the same calls once, untimed: their shapes seen
        inputs = payload.inputs(index)
        model.encode(inputs, batch_size=len(inputs), convert_to_numpy=True)
    for index in range(args.latency_calls):
        inputs = payload.inputs(index)
        started = time.perf_counter()
        model.encode(inputs, batch_size=len(inputs), convert_to_numpy=True)
        latencies.append(time.perf_counter() - started)
    latency = describe(latencies)
    return {
        "model_path": str(args.model_path),
        "device": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else args.device,
        "dtype": args.dtype,
        "torch": torch.__version__,
        "payload": args.payload,
        "per_request": len(payload.inputs(0)),
        "texts": len(texts),
        "throughput": throughput,
        "best_embeddings_per_s": max(entry["embeddings_per_s"] for entry in throughput.values()),
        "forward_limit": forward,
        "forward_limit_embeddings_per_s": max((entry["embeddings_per_s"] for entry in forward.values()), default=0),
        "latency_ms": {"calls": len(latencies), **{p: round(latency[p] * 1000, 3) for p in ("p50", "p99")}},
    }


def _forward_limit(torch, model, texts: list[str], batch_sizes: list[int], sync) -> dict:
    """Embeddings per second of the forward alone: texts tokenized once, sorted by length,
    each batch padded to its longest (the best a batcher can do), timed on a second pass
    over the batches."""
    if not batch_sizes:
        return {}
    lengths = [len(ids) for ids in model.tokenizer(texts, truncation=True, max_length=model.max_seq_length)["input_ids"]]
    order = sorted(range(len(texts)), key=lengths.__getitem__)
    results = {}
    for batch_size in batch_sizes:
        batches = []
        for start in range(0, len(order), batch_size):
            features = model.preprocess([texts[i] for i in order[start : start + batch_size]])
            batches.append({key: value.to(model.device) for key, value in features.items() if torch.is_tensor(value)})
        with torch.inference_mode():
            # Every batch once, untimed, as a server running for a while has seen its shapes:
            # warmed up on the first batch only, the timed pass averaged 30 ms a forward of
            # 512 rows on an H200, slower than encode() with its tokenizing.
            for features in batches:
                model.forward(dict(features))
            sync()
            started = time.perf_counter()
            for features in batches:
                model.forward(dict(features))
            sync()
        seconds = time.perf_counter() - started
        results[str(batch_size)] = {"seconds": round(seconds, 4), "embeddings_per_s": round(len(texts) / seconds, 2)}
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Embed a benchmark's inputs in-process with sentence-transformers.")
    parser.add_argument("--model-path", type=Path, required=True, help="a sentence-transformers model directory")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", choices=("float16", "bfloat16", "float32"), default="float16")
    parser.add_argument("--payload", choices=("single", "batch"), default="single")
    parser.add_argument("--per-request", type=int, default=32, help="texts per request of --payload batch")
    parser.add_argument("--requests", type=int, default=20000, help="requests' inputs embedded for throughput")
    parser.add_argument("--batch-sizes", type=lambda text: [int(v) for v in text.split(",")], default=[32, 256])
    parser.add_argument(
        "--forward-batch-sizes", type=lambda text: [int(v) for v in text.split(",") if v], default=[512, 2048],
        help="batch sizes of the forward-limit measure ('' skips it)",
    )
    parser.add_argument("--latency-calls", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    print_json(measure(args), args.json)


if __name__ == "__main__":
    main()
