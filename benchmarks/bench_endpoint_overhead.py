"""What the completion endpoint (serve --bundle) adds to a request beyond the engine's own time:
the HTTP exchange, parsing, context selection from the chunks of six standard-library packages
(asyncio, email, multiprocessing, unittest, importlib, concurrent: the bench_context corpus),
the template rendered, the prompt cut into pieces (every snippet treated as stored, the most
splitting work), detokenizing and the answer. Requests are llama.vscode /infill bodies at random
cursors of those files (30 lines before, 10 after), 4 tokens predicted by the shipped model
(transformers engine); the engine's time is taken inside the server around its `generate`, and
the overhead is the client's wall time less it. Goal (the served-request issue): p95 <= 20 ms.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import sysconfig
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit

ROOT = Path(__file__).resolve().parents[1]
STDLIB = Path(sysconfig.get_paths()["stdlib"])
PACKAGES = ("asyncio", "email", "multiprocessing", "unittest", "importlib", "concurrent")
REQUESTS = 200
WARMUP = 10


class Timed:
    """The real engine, its `generate` timed, every chunk of the file named as stored."""

    def __init__(self, engine, stored: set[str]) -> None:
        self.engine, self.stored = engine, stored
        self.context_length = engine.context_length
        self.seconds: list[float] = []

    def stored_chunks(self) -> set[str]:
        return self.stored

    def detokenize(self, tokens):
        return self.engine.detokenize(tokens)

    def generate(self, composed, max_tokens, on_token=None):
        started = time.perf_counter()
        try:
            return self.engine.generate(composed, max_tokens, on_token)
        finally:
            self.seconds.append(time.perf_counter() - started)


def main() -> None:
    from copilot_cli import CompileOptions, PrefillOptions, compile_templates, prefill_kv
    from copilot_cli.chunking import ChunkOptions, chunk_repository, read_chunks
    from copilot_cli.context import snippet_text
    from copilot_cli.core.models import default_model, load_tokenizer
    from copilot_cli.kv import chunk_name

    tokenizer = load_tokenizer(default_model())
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        repo = work / "stdlib"
        for name in PACKAGES:
            _copy_python(STDLIB / name, repo / name)
        chunks, registry = work / "std.jsonl", work / "std.registry.json"
        chunk_repository(
            ChunkOptions(repos=(repo,), out=chunks, registry=registry, use_cache=False, jobs=2),
            tokenizer,
        )
        compile_templates(CompileOptions(ROOT / "templates", work / "bundle"))
        prefill_kv(PrefillOptions(out=work / "kv", bundle=work / "bundle"))
        records = read_chunks(chunks).chunks
        stored = {chunk_name(snippet_text(c.first_path, c.text.rstrip("\n"), "xml"))
                  for c in records}  # fmt: skip
        files = sorted({c.first_path for c in records if c.first_path.endswith(".py")})
        measure(work, chunks, registry, stored, repo, files, len(records))


def _copy_python(source: Path, dest: Path) -> None:
    for path in source.rglob("*.py"):
        if "test" in path.relative_to(source).parts[:-1]:
            continue
        target = dest / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())


def measure(work, chunks, registry, stored, repo, files, chunk_count) -> None:
    from copilot_cli.serving.endpoint import make_server, open_endpoint
    from copilot_cli.serving.options import EndpointOptions

    options = EndpointOptions(
        kv_dir=work / "kv", bundle=work / "bundle", chunks=chunks, registry=registry, budget=1024
    )
    started = time.perf_counter()
    endpoint = open_endpoint(options)
    startup = time.perf_counter() - started
    timed = Timed(endpoint.engine, stored)
    endpoint.engine = timed
    server = make_server(endpoint, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/infill"
    rng = random.Random(0)
    overhead, compose, engine_ms, refused = [], [], [], []
    try:
        for number in range(WARMUP + REQUESTS):
            body = _request(repo, rng.choice(files), rng)
            data = json.dumps(body).encode()
            sent = urllib.request.Request(url, data, {"Content-Type": "application/json"})
            before = len(timed.seconds)
            began = time.perf_counter()
            try:
                with urllib.request.urlopen(sent, timeout=120) as response:
                    answer = json.load(response)
            except urllib.error.HTTPError as exc:  # a prompt past the model's context
                refused.append(json.load(exc)["error"]["message"])
                continue
            wall = time.perf_counter() - began
            if number < WARMUP or len(timed.seconds) == before:
                continue
            engine_ms.append(timed.seconds[-1] * 1000)
            overhead.append((wall - timed.seconds[-1]) * 1000)
            compose.append(answer["copilot"]["compose_ms"])
    finally:
        server.shutdown()
        server.server_close()
    p95 = statistics.quantiles(overhead, n=20)[-1]
    emit(
        "endpoint overhead per request (p95; HTTP, parse, context, template, pieces, answer) "
        "vs the engine's own time (median)",
        round(p95, 2),
        round(statistics.median(engine_ms), 2),
        "ms",
        goal="p95 <= 20 ms",
        passed=p95 <= 20,
        note=f"{len(overhead)} /infill requests at random cursors of {len(files)} files "
        f"({chunk_count} chunks of asyncio, email, multiprocessing, unittest, importlib, "
        f"concurrent; every snippet named stored); overhead median "
        f"{statistics.median(overhead):.2f} ms, compose median {statistics.median(compose):.2f} "
        f"/ p95 {statistics.quantiles(compose, n=20)[-1]:.2f} ms; start (model, chunks, index) "
        f"{startup:.1f} s; shipped model, budget 1024 tokens; {len(refused)} refused (400)",
    )


def _request(repo: Path, path: str, rng: random.Random) -> dict:
    lines = (repo / path).read_text(encoding="utf-8", errors="replace").splitlines(True)
    cut = rng.randrange(0, max(len(lines), 1))
    line = lines[cut] if lines else ""
    col = rng.randrange(0, len(line) + 1)
    return {
        "input_prefix": "".join(lines[max(0, cut - 30) : cut]) + line[:col],
        "input_suffix": line[col:] + "".join(lines[cut + 1 : cut + 10]),
        "input_extra": [],
        "prompt": "",
        "n_predict": 4,
        "stream": False,
        "cache_prompt": True,
        "copilot": {"file": path},
    }


if __name__ == "__main__":
    main()
