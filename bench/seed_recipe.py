"""The seed's recipe as a peer to measure against: one file, Starlette under uvicorn (httptools,
uvloop), an asyncio queue that gathers the requests of a 1 ms window, and the model's own
``encode`` run on them in an executor, answering OpenAI's ``/v1/embeddings`` shape.

    python -m embedgate.bench.seed_recipe --model-path DIR --port 8720
    python benchmark.py --url http://127.0.0.1:8720 --endpoint /v1/embeddings --model m --no-load ...

It has none of a server's duties (no validation beyond the shape, no limits, no errors in
a shape of their own, no metrics): what it costs per request is about the least a Python
server in front of ``encode`` can cost, which is what docs/performance.md compares with.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

# How long the batcher waits for one more request, as the seed's loop does.
WINDOW_S = 0.001


def build(model_path: str) -> Starlette:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(model_path, device="cpu")
    queue: asyncio.Queue = asyncio.Queue()

    async def batcher() -> None:
        loop = asyncio.get_running_loop()
        while True:
            texts, answers = [], []
            batch, answer = await queue.get()
            while True:
                texts += batch
                answers.append((answer, len(batch)))
                try:
                    batch, answer = await asyncio.wait_for(queue.get(), timeout=WINDOW_S)
                except asyncio.TimeoutError:
                    break
            try:
                vectors = await loop.run_in_executor(None, model.encode, texts)
            except Exception as error:  # noqa: BLE001 - each waiting request gets it
                for waiting, _ in answers:
                    waiting.set_exception(error)
                continue
            start = 0
            for waiting, count in answers:
                waiting.set_result(vectors[start : start + count])
                start += count

    async def embeddings(request: Request) -> Response:
        body = orjson.loads(await request.body())
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        answer = asyncio.get_running_loop().create_future()
        await queue.put((texts, answer))
        vectors = await answer
        data = [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
        usage = {"prompt_tokens": 0, "total_tokens": 0}
        return Response(
            orjson.dumps({"object": "list", "data": data, "model": body.get("model"), "usage": usage}),
            media_type="application/json",
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        running = asyncio.create_task(batcher())
        yield
        running.cancel()

    return Starlette(routes=[Route("/v1/embeddings", embeddings, methods=["POST"])], lifespan=lifespan)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-path", required=True, help="a sentence-transformers model directory")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8720)
    args = parser.parse_args()
    uvicorn.run(build(args.model_path), host=args.host, port=args.port, loop="uvloop", http="httptools",
                access_log=False, log_level="warning")


if __name__ == "__main__":
    main()
