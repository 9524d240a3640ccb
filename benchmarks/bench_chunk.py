"""chunk vs LangChain's RecursiveCharacterTextSplitter.from_language and semchunk, same corpus,
same Hugging Face tokenizer as the length function, same 384-token budget, one run.

Per language (Python: part of the standard library; Go: gin, cobra, urfave/cli; JavaScript and
TypeScript: fastify, express; benchmarks/corpora.py): throughput of --jobs 1 and 2 against one
serial tokenizer pass over the same bytes (the limit) and the peers. Then, on the whole
standard library plus sample_data/repo, quality per tool: throughput (MB/s of input), chunks
over the budget, definitions (functions/classes that fit the budget) cut across chunks, and
byte coverage. The peers run in
their own virtual environment (.venv-peers, made by `make bench`); Chonkie's code chunker needs
a tree-sitter language pack that downloads grammars at run time, so it is not run offline.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit

from copilot_cli.chunking import ChunkOptions, chunk_repository
from copilot_cli.chunking.languages import all_entities, parser_for
from copilot_cli.chunking.packer import TokenCounter
from copilot_cli.core.models import SHIPPED_MODEL, load_tokenizer

ROOT = Path(__file__).resolve().parents[1]
PEERS_PYTHON = ROOT / ".venv-peers" / "bin" / "python"
BUDGET = 384


def corpus(tmp: Path) -> Path:
    """A copy of the stdlib's .py files and the sample repository in one folder."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    target = tmp / "corpus"
    for path in sorted(stdlib.rglob("*.py")):
        if "site-packages" in path.parts or not path.is_file():
            continue
        dest = target / "stdlib" / path.relative_to(stdlib)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
    shutil.copytree(ROOT / "sample_data" / "repo", target / "repo")
    return target


def entity_char_spans(data: bytes, language: str, counter: TokenCounter) -> list[tuple[int, int]]:
    """Char spans of definitions that fit the budget (they must never be cut)."""
    parser = parser_for(language)
    if parser is None:
        return []
    tree = parser.parse(data)
    if tree.root_node.has_error:
        return []  # a file that does not parse has no trustworthy definitions (all tools)
    ascii_only = data.isascii()
    spans = []
    for entity in all_entities(tree.root_node):
        text = data[entity.start : entity.end].decode("utf-8", errors="replace")
        if _recount(counter.tokenizer, text) + 40 > BUDGET:
            continue
        if ascii_only:
            spans.append((entity.start, entity.end))
        else:
            start = len(data[: entity.start].decode("utf-8", errors="replace"))
            spans.append((start, start + len(text)))
    return spans


def score(files, spans_per_file, counter) -> tuple[int, int, int, float]:
    """(chunks over budget, definitions cut, definitions checked, coverage) for one tool."""
    over = cut = checked = 0
    covered = total = 0
    for (_path, language, data), spans in zip(files, spans_per_file, strict=True):
        text = data.decode("utf-8", errors="replace")
        total += len(text)
        over += sum(1 for s in spans if s[2] > BUDGET)
        found = [(s[0], s[1]) for s in spans if s[0] >= 0]
        marks = bytearray(len(text) + 1)
        for start, end in found:
            marks[start:end] = b"\x01" * (end - start)
        covered += sum(marks[: len(text)])
        for start, end in entity_char_spans(data, language, counter):
            checked += 1
            if not any(s <= start and end <= e for s, e in found):
                cut += 1
    return over, cut, checked, covered / total if total else 1.0


STDLIB_PARTS = ["asyncio", "email", "json", "http", "logging", "unittest", "xml", "importlib"]
STDLIB_FILES = ["argparse.py", "typing.py", "subprocess.py", "inspect.py", "dataclasses.py"]


def language_corpora(tmp: Path) -> dict[str, Path]:
    """One corpus per language: part of the stdlib (Python), gin/cobra/urfave-cli (Go),
    fastify/express (JavaScript and TypeScript), fetched by benchmarks/corpora.py."""
    from corpora import corpus as fetched

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    python = tmp / "python"
    for part in STDLIB_PARTS:
        shutil.copytree(
            stdlib / part, python / part, ignore=shutil.ignore_patterns("__pycache__", "test*")
        )
    for name in STDLIB_FILES:
        shutil.copyfile(stdlib / name, python / name)
    return {"python": python, "go": fetched("go"), "javascript": fetched("javascript")}


def per_language(tokenizer, counter: TokenCounter, tmp: Path) -> None:
    """Throughput per language: ours --jobs 1 and 2, one serial tokenizer pass over the same
    bytes (the limit of a token-exact chunker), semchunk and LangChain, in interleaved rounds."""
    for language, root in language_corpora(tmp).items():
        _language_rows(language, root, tokenizer, counter, tmp)


def _language_rows(language: str, root: Path, tokenizer, counter: TokenCounter, tmp: Path) -> None:
    files = [p for p in sorted(root.rglob("*")) if p.is_file()]
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in files]
    megabytes = sum(p.stat().st_size for p in files) / 1e6
    out = tmp / f"{language}.jsonl"

    def ours(jobs: int) -> None:
        if counter.pieces is not None:  # every run starts cold, as a new process does
            counter.pieces.clear()
        options = ChunkOptions(
            repos=(root,), out=out, max_tokens=BUDGET, use_cache=False, jobs=jobs
        )
        chunk_repository(options, tokenizer)

    def limit() -> None:
        for text in texts:
            tokenizer.backend_tokenizer.encode(text, add_special_tokens=False)

    peer_files = [(str(p), _peer_language(p)) for p in files]

    def semchunk_seconds() -> float:
        peers = _run_peers(peer_files, tools=["semchunk"])
        return peers["semchunk"]["seconds"] if peers else float("nan")

    # every round: ours --jobs 1, the limit, ours --jobs 2, semchunk, so that load from
    # other tenants of this shared machine falls on all alike; medians of 5 rounds
    ours(1)
    limit()
    rounds: dict[str, list[float]] = {"ours": [], "limit": [], "jobs2": [], "semchunk": []}
    for _ in range(5):
        rounds["ours"].append(_seconds(lambda: ours(1)))
        rounds["limit"].append(_seconds(limit))
        rounds["jobs2"].append(_seconds(lambda: ours(2)))
        rounds["semchunk"].append(semchunk_seconds())
    t_ours, t_limit, t_jobs2, t_semchunk = (statistics.median(v) for v in rounds.values())
    records = [json.loads(line) for line in out.read_text().splitlines()[1:]]
    over = sum(1 for r in records if _recount(tokenizer, r["header"] + r["text"]) > BUDGET)
    emit(
        f"chunk {language} --jobs 1 vs one serial tokenizer pass (the limit)",
        megabytes / t_ours,
        megabytes / t_limit,
        "MB/s",
        higher_is_better=True,
        goal="ratio >= 0.6",
        passed=t_limit / t_ours >= 0.6,
        note=f"{megabytes:.2f} MB, {len(files)} files, {len(records)} chunks, "
        f"over budget by exact recount {over}; median of 5 interleaved rounds, each run of "
        "ours with an empty piece cache"
        + (
            ""
            if t_limit / t_ours >= 0.6
            else "; not met: besides the piece cache's pass, tree-sitter parsing and the "
            "entity query take about a third of the time (profile in docs/chunk.md)"
        ),
    )
    if not PEERS_PYTHON.exists():
        return
    langchain_peer = _run_peers(peer_files, tools=["langchain"])
    semchunk = megabytes / t_semchunk
    langchain = (
        megabytes
        / langchain_peer["langchain RecursiveCharacterTextSplitter.from_language"]["seconds"]
    )
    for jobs, seconds, goal in ((1, t_ours, 1.5), (2, t_jobs2, 2.5)):
        emit(
            f"chunk {language} --jobs {jobs} vs semchunk",
            megabytes / seconds,
            semchunk,
            "MB/s",
            higher_is_better=True,
            goal=f"ratio >= {goal}",
            passed=megabytes / seconds >= goal * semchunk,
            note=f"LangChain from_language {langchain:.2f} MB/s; limit "
            f"{megabytes / t_limit:.2f} MB/s; medians of 5 interleaved rounds (ours, limit, "
            "ours --jobs 2, semchunk in a fresh process)"
            + (
                ""
                if megabytes / seconds >= goal * semchunk
                else f"; not met: in the same rounds ours --jobs 1 ran at "
                f"{t_limit / t_ours:.2f} of one tokenizer pass and semchunk at "
                f"{t_limit / t_semchunk:.2f}, and --jobs 2 ran {t_ours / t_jobs2:.2f}x "
                f"--jobs 1 (2 cores shared with other tenants: load average "
                f"{os.getloadavg()[0]:.2f} at the end)"
            ),
        )


def _recount(tokenizer, text: str) -> int:
    """The judge: the tokenizer's own count, none of the chunker's shortcuts."""
    return len(tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids)


def _peer_language(path: Path) -> str:
    return {".go": "go", ".py": "python", ".ts": "typescript"}.get(path.suffix, "javascript")


def _seconds(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _run_peers(
    files: list[tuple[str, str]],
    repeats: int = 1,
    tools: list[str] | None = None,
    tokenizer: str = str(SHIPPED_MODEL / "tokenizer.json"),
) -> dict | None:
    if not PEERS_PYTHON.exists():
        return None
    job = {
        "files": [list(f) for f in files],
        "tokenizer": tokenizer,
        "budget": BUDGET,
        "repeats": repeats,
        "tools": tools or ["langchain", "semchunk"],
    }
    proc = subprocess.run(
        [str(PEERS_PYTHON), str(Path(__file__).parent / "peers" / "chunk_peers.py")],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "true"},
    )
    return json.loads(proc.stdout)["tools"]


def main() -> None:
    tokenizer = load_tokenizer(str(SHIPPED_MODEL))
    counter = TokenCounter(tokenizer)
    with tempfile.TemporaryDirectory() as tmp:
        per_language(tokenizer, counter, Path(tmp))
        root = corpus(Path(tmp))
        out = Path(tmp) / "chunks.jsonl"
        started = time.perf_counter()
        result = chunk_repository(
            ChunkOptions(repos=(root,), out=out, max_tokens=BUDGET, use_cache=False), tokenizer
        )
        ours_seconds = time.perf_counter() - started
        records = [json.loads(line) for line in out.read_text().splitlines()[1:]]
        by_path: dict[str, list] = {}
        for record in records:
            for loc in record["locations"]:
                by_path.setdefault(loc["path"], []).append((loc, record))
        files = []
        for path in sorted(by_path):
            language = by_path[path][0][1]["language"]
            files.append((path, language, (root / path).read_bytes()))
        megabytes = sum(len(d) for _, _, d in files) / 1e6
        ours_spans = []
        for path, _, data in files:
            spans = []
            for loc, record in sorted(by_path[path], key=lambda x: x[0]["start_byte"]):
                start = (
                    len(data[: loc["start_byte"]].decode("utf-8", errors="replace"))
                    if not data.isascii()
                    else loc["start_byte"]
                )
                spans.append([start, start + len(record["text"]), record["token_count"]])
            ours_spans.append(spans)
        ours = score(files, ours_spans, counter)
        emit_tool("copilot-opt chunk", megabytes / ours_seconds, ours, None)

        if not PEERS_PYTHON.exists():
            emit(
                "chunk throughput vs peers",
                megabytes / ours_seconds,
                0.0,
                "MB/s",
                higher_is_better=True,
                note="peers not installed: run `make bench`",
            )
            return
        peers = _run_peers([(str(root / p), lang) for p, lang, _ in files])
        fastest = 0.0
        for name, data in peers.items():
            throughput = megabytes / data["seconds"]
            fastest = max(fastest, throughput)
            emit_tool(name, throughput, score(files, data["files"], counter), ours)
        emit(
            "chunk throughput vs the fastest peer",
            megabytes / ours_seconds,
            fastest,
            "MB/s",
            higher_is_better=True,
            goal="ratio >= 1",
            passed=megabytes / ours_seconds >= fastest,
            note=f"{megabytes:.1f} MB, {result.summary.files} files, "
            f"{result.summary.chunks_written} chunks",
        )


def emit_tool(name: str, throughput: float, scored: tuple, ours: tuple | None) -> None:
    """One row per tool; peers are compared with ours on kept definitions and coverage."""
    over, cut, checked, coverage = scored
    kept = 1 - cut / checked if checked else 1.0
    note = (
        f"{throughput:.2f} MB/s; chunks over budget {over}; definitions cut {cut} of "
        f"{checked}; byte coverage {coverage:.4%}"
    )
    if ours is None:
        emit(
            f"{name}: definitions kept whole",
            kept,
            1.0,
            "share",
            higher_is_better=True,
            goal="0 over budget, 0 cut, 100% coverage",
            passed=over == 0 and cut == 0 and coverage >= 0.9999,
            note=note,
        )
        return
    ours_kept = 1 - ours[1] / ours[2] if ours[2] else 1.0
    emit(
        f"definitions kept whole: ours vs {name}",
        ours_kept,
        kept,
        "share",
        higher_is_better=True,
        goal="ratio >= 1",
        passed=ours_kept >= kept,
        note=note,
    )


if __name__ == "__main__":
    main()
