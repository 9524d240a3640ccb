"""chunk with the production tokenizers (copilot_cli.instruments: GPT-2, Qwen2, Llama 3,
StarCoder2, DeepSeek-Coder, CodeLlama's SentencePiece, rebuilt from llama.cpp's vocab files)
vs one serial `Tokenizer.encode` pass over the same bytes (the limit of a token-exact chunker)
and semchunk with the same tokenizer, same 384-token budget, one run.

Corpora: part of the Python standard library (json, email, http, asyncio, logging, unittest,
argparse.py...), and the Go and JavaScript corpora of benchmarks/corpora.py (gin, cobra,
urfave/cli; fastify, express), each family on each (semchunk on Python only). Per tokenizer
and corpus: medians of 3 interleaved rounds (ours --jobs 1 with an empty piece cache, the
limit, semchunk in a fresh process), then every chunk recounted by the tokenizer itself
(chunks over budget must be 0). Needs `make real-models` (else skipped).
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_chunk import PEERS_PYTHON, _peer_language, _run_peers
from common import emit
from corpora import corpus as code_corpus

from copilot_cli import instruments
from copilot_cli.chunking import ChunkOptions, chunk_repository
from copilot_cli.chunking.packer import TokenCounter
from copilot_cli.core.models import load_tokenizer

BUDGET = 384
PARTS = ("json", "email", "http", "asyncio", "logging", "unittest")
FILES = ("argparse.py", "textwrap.py", "csv.py", "dataclasses.py")
ROUNDS = 3
FAMILIES = ("gpt2", "qwen2", "llama3", "starcoder2", "deepseek-coder", "codellama-spm")


def corpus(tmp: Path) -> Path:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    root = tmp / "python"
    for part in PARTS:
        shutil.copytree(
            stdlib / part, root / part, ignore=shutil.ignore_patterns("__pycache__", "test*")
        )
    for name in FILES:
        shutil.copyfile(stdlib / name, root / name)
    return root


def _seconds(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def emit_chunk_rate(
    name: str, megabytes: float, seconds: tuple[float, float], faults: int, note: str
) -> None:
    """One row: chunk's MB/s against one serial tokenizer pass (seconds: ours, the limit),
    the goal 0.6x with no chunk over budget or miscounted (`faults`)."""
    t_ours, t_limit = seconds
    emit(
        name,
        megabytes / t_ours,
        megabytes / t_limit,
        "MB/s",
        higher_is_better=True,
        goal="ratio >= 0.6; 0 over budget",
        passed=t_limit / t_ours >= 0.6 and faults == 0,
        note=note,
    )


def recounted(out: Path, tokenizer) -> tuple[list[dict], int, int]:
    """(the chunk records of `out`, how many are over BUDGET, how many record a count other
    than the tokenizer's own for header + text)."""
    records = [json.loads(line) for line in out.read_text().splitlines()[1:]]
    recount = [
        len(tokenizer.backend_tokenizer.encode(r["header"] + r["text"], add_special_tokens=False))
        for r in records
    ]
    over = sum(1 for n in recount if n > BUDGET)
    wrong = sum(1 for n, r in zip(recount, records, strict=True) if n != r["token_count"])
    return records, over, wrong


def one_tokenizer(name: str, root: Path, tmp: Path, language: str = "python") -> None:
    folder = instruments.tokenizer_dir(name)
    tokenizer = load_tokenizer(str(folder))
    counter = TokenCounter(tokenizer)
    files = [p for p in sorted(root.rglob("*")) if p.is_file()]
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in files]
    megabytes = sum(p.stat().st_size for p in files) / 1e6
    out = tmp / f"{name}-{language}.jsonl"

    def ours() -> None:
        if counter.pieces is not None:
            counter.pieces.clear()
        options = ChunkOptions(repos=(root,), out=out, max_tokens=BUDGET, use_cache=False, jobs=1)
        chunk_repository(options, tokenizer)

    def limit() -> None:
        for text in texts:
            tokenizer.backend_tokenizer.encode(text, add_special_tokens=False)

    peer_files = [(str(p), _peer_language(p)) for p in files]

    def semchunk() -> float:
        peers = _run_peers(peer_files, tools=["semchunk"], tokenizer=str(folder / "tokenizer.json"))
        return peers["semchunk"]["seconds"] if peers else float("nan")

    ours()
    limit()
    rounds: dict[str, list[float]] = {"ours": [], "limit": [], "semchunk": []}
    for _ in range(ROUNDS):
        rounds["ours"].append(_seconds(ours))
        rounds["limit"].append(_seconds(limit))
        if PEERS_PYTHON.exists() and language == "python":
            rounds["semchunk"].append(semchunk())
    t_ours, t_limit = statistics.median(rounds["ours"]), statistics.median(rounds["limit"])
    records, over, wrong = recounted(out, tokenizer)
    family = counter.family.name if counter.family is not None else "none (recounts)"
    facts = (
        f"{megabytes:.2f} MB, {len(files)} files, {len(records)} chunks; family {family}; "
        f"over budget by recount {over}, recorded count wrong {wrong}; medians of {ROUNDS} "
        "interleaved rounds, each run of ours with an empty piece cache"
    )
    on = "" if language == "python" else f"{language} "  # the Python rows keep their names
    emit_chunk_rate(
        f"chunk {on}with the {name} tokenizer, --jobs 1 vs one serial tokenizer pass (the limit)",
        megabytes,
        (t_ours, t_limit),
        over + wrong,
        facts,
    )
    if rounds["semchunk"]:
        t_semchunk = statistics.median(rounds["semchunk"])
        emit(
            f"chunk with the {name} tokenizer, --jobs 1 vs semchunk (same tokenizer)",
            megabytes / t_ours,
            megabytes / t_semchunk,
            "MB/s",
            higher_is_better=True,
            goal="ratio >= 1.5",
            passed=t_semchunk / t_ours >= 1.5,
            note=facts,
        )


def main() -> None:
    if not instruments.available():
        print(f"skipped: no real instruments in {instruments.root()} (make real-models)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        roots = {"python": corpus(Path(tmp))}
        roots.update((language, code_corpus(language)) for language in ("go", "javascript"))
        for language, root in roots.items():
            for name in FAMILIES:
                one_tokenizer(name, root, Path(tmp), language)


if __name__ == "__main__":
    main()
