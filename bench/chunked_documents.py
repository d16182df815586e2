"""Long documents through chunked requests, against the same chunks sent as inputs.

``python -m embedgate.bench.chunked_documents --url URL --model NAME --tokenizer
TOKENIZER_JSON``: documents of about ``--tokens`` tokens (sentences of common words, each
document its own: ``--seed``), ``--concurrency`` clients each sending one document per
request, in two phases on documents the server has not seen:

- chunked: ``POST /v1/embeddings`` with ``chunking`` (the server cuts and embeds; with ``--late``,
  late chunks: each document through the model's late-chunking graph, in windows of its max
  length, each chunk pooled from its tokens there);
- as inputs: other documents of the same size, cut here with the same code and the model's
  ``tokenizer.json`` (``api/compute/requests/chunking.py``, untimed), each document's chunk
  texts sent as one request's inputs.

Each phase runs twice, on half of its documents, in the order chunked, inputs, inputs,
chunked.

Reports each phase's documents/s and chunk tokens/s (the chunks' own tokens), the tokens
the model ran for each (``usage``: chunks with their special tokens, or late chunks' windows),
and the inputs the server answered from its response cache (0 unless the seed repeats a run).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from pathlib import Path

import httpx

from embedgate.api.compute.requests.chunking import Chunking, chunk_texts
from embedgate.contract.preprocess.text import TextTokenizer

from .payloads import sentence
from .report import print_json


def documents(count: int, tokens: int, seed: int) -> list[str]:
    """``count`` documents of about ``tokens`` tokens (MiniLM's WordPiece: a sentence of n
    common words and its period is n + 1), none like another."""
    rng = random.Random(seed)
    out = []
    for index in range(count):
        parts, size = [f"Document {seed}-{index}."], 3
        while size < tokens:
            words = rng.randint(8, 24)
            parts.append(sentence(rng, words))
            size += words + 1
        out.append(" ".join(parts))
    return out


async def _phase(url: str, bodies: list[dict], concurrency: int) -> dict:
    """Every body sent once, ``concurrency`` at a time: seconds, and what came back."""
    queue: asyncio.Queue[dict] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    cached = failed = tokens = 0

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal cached, failed, tokens
        while not queue.empty():
            body = queue.get_nowait()
            response = await http.post("/v1/embeddings", json=body)
            if response.status_code != 200:
                failed += 1
                continue
            cached += int(response.headers.get("x-cached-inputs", "0"))
            tokens += response.json()["usage"]["prompt_tokens"]

    async with httpx.AsyncClient(base_url=url, timeout=300) as http:
        started = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(concurrency)))
        seconds = time.perf_counter() - started
    return {"seconds": round(seconds, 3), "cached_inputs": cached, "failed": failed, "model_tokens": tokens}


def measure(args: argparse.Namespace) -> dict:
    tokenizer = TextTokenizer(Path(args.tokenizer), args.max_length)
    chunking = {"max_tokens": args.max_tokens, "overlap": args.overlap, "boundary": args.boundary, "late": args.late}
    plan = Chunking(args.max_tokens, args.overlap, args.boundary)
    # Two disjoint sets: neither phase's chunks are the other's.
    chunked_docs = documents(args.documents, args.tokens, args.seed)
    input_docs = documents(args.documents, args.tokens, args.seed + 1_000_003)

    def cut_up(texts: list[str]) -> list:
        return chunk_texts(tokenizer, texts, plan, "", args.max_length, 1 << 30)

    cut = cut_up(input_docs)
    # The chunks' own tokens: the server cuts the chunked phase's documents with the same code.
    chunked_tokens = sum(chunk.tokens for mine in cut_up(chunked_docs) for chunk in mine)
    input_tokens = sum(chunk.tokens for mine in cut for chunk in mine)
    chunk_bodies = [{"model": args.model, "input": [doc], "chunking": chunking} for doc in chunked_docs]
    input_bodies = [{"model": args.model, "input": [doc[c.start : c.end] for c in mine]} for doc, mine in zip(input_docs, cut)]
    # A warm-up of other documents (the model's first runs, the connections).
    warm = documents(args.concurrency, args.tokens, args.seed + 2_000_003)
    asyncio.run(_phase(args.url, [{"model": args.model, "input": [d], "chunking": chunking} for d in warm],
                       args.concurrency))
    # Each phase twice on half of its documents, in the order A B B A: a machine whose speed
    # drifts during the run weighs on both alike.
    half = len(chunk_bodies) // 2
    runs = [
        ("chunked", chunk_bodies[:half]), ("inputs", input_bodies[:half]),
        ("inputs", input_bodies[half:]), ("chunked", chunk_bodies[half:]),
    ]
    totals: dict[str, dict] = {}
    for name, bodies in runs:
        result = asyncio.run(_phase(args.url, bodies, args.concurrency))
        total = totals.setdefault(name, {"seconds": 0.0, "cached_inputs": 0, "failed": 0, "model_tokens": 0})
        for key, value in result.items():
            total[key] = round(total[key] + value, 3)
    chunked, inputs = totals["chunked"], totals["inputs"]
    report = {
        "config": {key: value for key, value in vars(args).items() if key != "json"},
        "chunks_per_document": round(sum(len(mine) for mine in cut) / len(cut), 1),
        "chunked": {**chunked, "documents_per_s": round(args.documents / chunked["seconds"], 2),
                    "chunk_tokens_per_s": round(chunked_tokens / chunked["seconds"])},
        "as_inputs": {**inputs, "documents_per_s": round(args.documents / inputs["seconds"], 2),
                      "chunk_tokens_per_s": round(input_tokens / inputs["seconds"])},
    }
    report["ratio"] = round(report["chunked"]["chunk_tokens_per_s"] / report["as_inputs"]["chunk_tokens_per_s"], 3)
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--model", required=True)
    parser.add_argument("--tokenizer", required=True, help="the model's tokenizer.json")
    parser.add_argument("--max-length", type=int, default=256, help="the model's max_seq_length")
    parser.add_argument("--documents", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--max-tokens", type=int, default=256 - 2)
    parser.add_argument("--overlap", type=int, default=32)
    parser.add_argument("--boundary", choices=("token", "whitespace", "sentence"), default="sentence")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--late", action="store_true", help="late chunks (a server with EMBEDGATE_LATE_CHUNKING)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    print_json(measure(args), args.json)


if __name__ == "__main__":
    main()
