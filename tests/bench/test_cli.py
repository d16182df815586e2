"""The benchmark's command line: what it refuses before touching any server."""

import asyncio
import json
import os
import threading

import pytest
from aiohttp import web

from embedgate.bench import cli


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--inprocess-only"], "needs --requests"),
        (["--payload", "image", "--inprocess"], "covers sentence-transformer models"),
        (["--pretrained", "openai", "--inprocess"], "covers sentence-transformer models"),
        (["--payload", "image", "--endpoint", "/v1/embeddings"], "needs --endpoint /infer"),
        (["--payload", "file"], "needs --input-file"),
        (["--concurrency", "0"], "--concurrency must be at least 1"),
        (["--requests", "0"], "--requests must be at least 1"),
        (["--header", "no colon"], "is not 'NAME: VALUE'"),
        (["--repeat", "1.5"], "--repeat must be between 0 and 1"),
        (["--model-path", "/m", "--compare-model", "other"], "--model-path loads a sentence-transformer model"),
        (["--payload", "image", "--repeat", "0.5"], "--repeat applies to generated text"),
    ],
)
def test_contradictory_options_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_requests_and_duration_exclude_each_other(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--requests", "5", "--duration", "3"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_server_processes_are_looked_for_only_on_this_machine():
    assert cli._server_roots("http://10.1.2.3:8686", []) == []
    assert cli._server_roots("http://example.org", []) == []
    assert cli._server_roots("http://example.org", [42]) == [42]


def test_in_process_only_reports_a_missing_model_clearly(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--inprocess-only", "--requests", "2", "--model-repository", str(tmp_path)])
    assert "in-process baseline" in str(exc.value.code) and "not found" in str(exc.value.code)


class KeyedStandIn:
    """A server that wants a bearer key and answers like embedgate, in its own thread."""

    def __init__(self, key: str):
        self.key = key
        self.paths: list[str] = []
        self.inferences = 0
        self.loop = asyncio.new_event_loop()
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    async def handle(self, request: web.Request) -> web.Response:
        self.paths.append(request.path)
        if request.headers.get("Authorization") != f"Bearer {self.key}":
            return web.json_response({"error": {"status": 401, "code": "unauthorized", "message": "key"}}, status=401)
        if request.path == "/load_sentence_transformer_model":
            return web.json_response({"status": "already_loaded", "max_seq_length": 128})
        if request.path == "/metrics":
            n = self.inferences
            entry = {"name": "org/m", "triton_name": "org--m", "inference_count": n, "execution_count": n // 2}
            return web.json_response({"model_stats": [entry]})
        texts = (await request.json())["text"]
        self.inferences += len(texts)
        return web.json_response({"text_embeddings": [[0.5, 0.5]] * len(texts), "processingTimeMs": 1.0})

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self.handle)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        self.started.set()
        self.loop.run_forever()

    def __enter__(self) -> "KeyedStandIn":
        self.thread.start()
        self.started.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def test_a_whole_run_sends_the_key_everywhere_and_writes_the_report(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EMBEDGATE_API_KEY", "secret")
    with KeyedStandIn("secret") as server:
        out = tmp_path / "report.json"
        cli.main(["--url", server.url, "--model", "org/m", "--payload", "batch", "--batch-size", "3",
                  "--requests", "10", "--concurrency", "2", "--warmup", "0", "--json", str(out)])
    assert server.paths[0] == "/load_sentence_transformer_model"
    assert server.paths.count("/infer") == 10
    report = json.loads(out.read_text())
    assert report["load"]["successful_requests"] == 10 and report["load"]["embeddings"] == 30
    assert report["triton"]["inferences"] == 30 and report["triton"]["average_batch_size"] == 2.0
    # The stand-in listens from this very process: found by its port, its memory sampled.
    assert os.getpid() in report["memory"]["pids"] and report["memory"]["peak_by_role_mb"]["gateway"] > 0
    assert "Total requests: 10" in capsys.readouterr().out
