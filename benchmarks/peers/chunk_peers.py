"""Run the peer chunkers (in their own venv: .venv-peers) and report chunk spans.

stdin: {"files": [[path, language], ...], "tokenizer": "tokenizer.json", "budget": 384,
        "repeats": 3, "tools": ["langchain", "semchunk"]}
Each tool's time is the median of `repeats` runs, each with a fresh splitter (semchunk's
memoized counter starts empty every time, as a new process would).
stdout: {"tools": {name: {"seconds": s, "files": [[[start_char, end_char, tokens], ...], ...]}}}
A chunk that cannot be found verbatim in its file (the splitter altered it) gets start -1.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from tokenizers import Tokenizer


def spans(text: str, chunks: list[str], count) -> list[list[int]]:
    out, position = [], 0
    for chunk in chunks:
        start = text.find(chunk, position)
        if start >= 0:
            position = start + len(chunk)
            out.append([start, start + len(chunk), count(chunk)])
        else:
            out.append([-1, -1, count(chunk)])
    return out


def timed(run, repeats: int):
    """(median seconds of `repeats` runs, the last run's output)."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - started)
    return statistics.median(times), out


def run_semchunk(texts: list[str], count, budget: int, repeats: int) -> dict:
    import semchunk

    def semchunk_run():
        def fresh_count(text: str) -> int:  # semchunk memoizes per counter function
            return count(text)

        chunker = semchunk.chunkerify(fresh_count, chunk_size=budget)
        return [chunker(text) if text.strip() else [] for text in texts]

    seconds, chunked = timed(semchunk_run, repeats)
    return {
        "seconds": seconds,
        "files": [spans(t, c, count) for t, c in zip(texts, chunked, strict=False)],
    }


def main() -> None:
    job = json.load(sys.stdin)
    tokenizer = Tokenizer.from_file(job["tokenizer"])

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    texts = [Path(p).read_text(encoding="utf-8", errors="replace") for p, _ in job["files"]]
    budget = job["budget"]
    results = {}

    from langchain_text_splitters import Language, RecursiveCharacterTextSplitter

    splitters = {}
    for lang in {lang for _, lang in job["files"]}:
        kind = {
            "python": Language.PYTHON,
            "markdown": Language.MARKDOWN,
            "go": Language.GO,
            "rust": Language.RUST,
            "javascript": Language.JS,
            "typescript": Language.TS,
            "rst": Language.RST,
        }.get(lang)
        if kind is None:
            splitters[lang] = RecursiveCharacterTextSplitter(
                chunk_size=budget, chunk_overlap=0, length_function=count
            )
        else:
            splitters[lang] = RecursiveCharacterTextSplitter.from_language(
                kind, chunk_size=budget, chunk_overlap=0, length_function=count
            )

    def langchain():
        return [
            splitters[lang].split_text(text)
            for text, (_, lang) in zip(texts, job["files"], strict=False)
        ]

    tools = job.get("tools", ["langchain", "semchunk"])
    if "langchain" in tools:
        seconds, chunked = timed(langchain, job.get("repeats", 1))
        results["langchain RecursiveCharacterTextSplitter.from_language"] = {
            "seconds": seconds,
            "files": [spans(t, c, count) for t, c in zip(texts, chunked, strict=False)],
        }
    if "semchunk" in tools:
        results["semchunk"] = run_semchunk(texts, count, budget, job.get("repeats", 1))
    json.dump({"tools": results}, sys.stdout)


if __name__ == "__main__":
    main()
