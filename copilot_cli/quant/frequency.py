"""Token frequencies of a corpus (files or folders) with the model's own tokenizer."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from copilot_cli.core.errors import InputError

MAX_FILE_BYTES = 2_000_000
_SKIP_DIRS = {".git", "node_modules", "__pycache__", ".venv", "venv", "target", "build", "dist"}


@dataclass
class CorpusCounts:
    counts: torch.Tensor  # int64 [vocab]
    files: int
    tokens: int
    corpus_hash: str


def corpus_files(paths: list[Path]) -> list[Path]:
    """Text files under `paths` (sorted, deduplicated), skipping VCS/build folders and binaries."""
    found: set[Path] = set()
    for root in paths:
        if not root.exists():
            raise InputError("corpus path does not exist", where=str(root))
        if root.is_file():
            found.add(root)
            continue
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
            found.update(Path(folder) / name for name in files)
    return sorted(p for p in found if _is_text(p))


def _is_text(path: Path) -> bool:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return False
        with path.open("rb") as handle:
            return b"\0" not in handle.read(8192)
    except OSError:
        return False


def count_tokens(paths: list[Path], tokenizer: Any, vocab_size: int) -> CorpusCounts:
    """Count token ids over every text file (decoded as UTF-8 with replacement)."""
    files = corpus_files(paths)
    counts = torch.zeros(vocab_size, dtype=torch.int64)
    digest = hashlib.sha256()
    total = 0
    batch: list[str] = []

    def flush() -> None:
        nonlocal total
        if not batch:
            return
        for ids in tokenizer(batch, add_special_tokens=False).input_ids:
            if ids:
                ids_t = torch.tensor(ids, dtype=torch.int64)
                counts.add_(torch.bincount(ids_t.clamp_max(vocab_size - 1), minlength=vocab_size))
                total += len(ids)
        batch.clear()

    for path in files:
        data = path.read_bytes()
        digest.update(hashlib.sha256(data).digest())
        batch.append(data.decode("utf-8", errors="replace"))
        if len(batch) >= 64:
            flush()
    flush()
    return CorpusCounts(
        counts=counts, files=len(files), tokens=total, corpus_hash=digest.hexdigest()
    )


def select_kept(
    counts: torch.Tensor, *, keep_fp16: int | None, keep_coverage: float | None, always: list[int]
) -> tuple[list[int], float, list[str]]:
    """Rows kept in FP16: the top-N by frequency or the top rows covering a share of tokens.

    Ties are broken by token id (deterministic). `always` (special and added tokens) is kept in
    addition. Returns (sorted ids, share of corpus tokens they serve, warnings).
    """
    vocab = counts.numel()
    warnings: list[str] = []
    order = sorted(range(vocab), key=lambda i: (-int(counts[i]), i))
    if keep_coverage is not None:
        total = int(counts.sum())
        running, chosen = 0, []
        for token in order:
            if total == 0 or running >= keep_coverage * total:
                break
            chosen.append(token)
            running += int(counts[token])
    else:
        n = keep_fp16 or 0
        if n > vocab:
            warnings.append(
                f"--keep-fp16 {n} is larger than the vocabulary ({vocab}); clamped to {vocab}"
            )
            n = vocab
        chosen = order[:n]
    kept = sorted(set(chosen) | {i for i in always if 0 <= i < vocab})
    total = int(counts.sum())
    share = float(counts[kept].sum()) / total if total and kept else 0.0
    return kept, share, warnings
