"""Token frequencies of a corpus (files or folders) with the model's own tokenizer."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from copilot_cli.core.inputs import decode_utf8
from copilot_cli.core.options import OptionError

MAX_FILE_BYTES = 2_000_000
_SKIP_DIRS = {".git", "node_modules", "__pycache__", ".venv", "venv", "target", "build", "dist"}


# Share of replacement characters above which a file that is not UTF-8 is taken for binary
# data rather than text in another encoding (dense Latin-1 prose has about 15%, random bytes
# over 50%).
MAX_UNDECODABLE = 0.3


@dataclass
class CorpusCounts:
    counts: torch.Tensor  # int64 [vocab]
    files: int
    tokens: int
    corpus_hash: str
    skipped: dict[str, list[str]] = field(default_factory=dict)  # reason -> files
    not_utf8: list[str] = field(default_factory=list)  # counted with bytes replaced

    def notes(self) -> list[str]:
        """What a user should hear about the corpus: files skipped, files not UTF-8."""
        notes = [
            f"corpus: {len(files)} {reason} file(s) skipped ({_names(files)})"
            for reason, files in sorted(self.skipped.items())
        ]
        if self.not_utf8:
            notes.append(
                f"corpus: {len(self.not_utf8)} file(s) not UTF-8, counted with undecodable "
                f"bytes replaced ({_names(self.not_utf8)})"
            )
        return notes


def _names(files: list[str], limit: int = 5) -> str:
    more = f" and {len(files) - limit} more" if len(files) > limit else ""
    return ", ".join(files[:limit]) + more


def corpus_files(paths: list[Path], skipped: dict[str, list[str]] | None = None) -> list[Path]:
    """Text files under `paths` (sorted, deduplicated), skipping VCS/build folders and binaries
    (each skipped file recorded in `skipped` by reason)."""
    found: set[Path] = set()
    for root in paths:
        if not root.exists():
            raise OptionError("corpus", f"{root} does not exist")
        if root.is_file():
            found.add(root)
            continue
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
            found.update(Path(folder) / name for name in files)
    kept = []
    for path in sorted(found):
        reason = _not_text(path)
        if reason is None:
            kept.append(path)
        elif skipped is not None:
            skipped.setdefault(reason, []).append(str(path))
    return kept


def _not_text(path: Path) -> str | None:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return "too large"
        with path.open("rb") as handle:
            return "binary" if b"\0" in handle.read(8192) else None
    except OSError:
        return "unreadable"


def count_tokens(paths: list[Path], tokenizer: Any, vocab_size: int) -> CorpusCounts:
    """Count token ids over every text file. A file named in `paths` must be UTF-8; one found
    in a named folder is decoded with undecodable bytes replaced (and named in a warning), or
    skipped when it is mostly undecodable.

    Raises:
        InputError: a file named in `paths` is not UTF-8 (naming the byte offset).
        OptionError: the corpus holds no usable text (every file skipped, empty or garbage).
    """
    named = {path for path in paths if path.is_file()}
    skipped: dict[str, list[str]] = {}
    not_utf8: list[str] = []
    files = corpus_files(paths, skipped)
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

    used = 0
    for path in files:
        data = path.read_bytes()
        text = decode_utf8(data, str(path)) if path in named else None
        text = text if text is not None else _decoded(data, path, skipped, not_utf8)
        if text is None:
            continue
        digest.update(hashlib.sha256(data).digest())
        batch.append(text)
        used += 1
        if len(batch) >= 64:
            flush()
    flush()
    result = CorpusCounts(
        counts=counts,
        files=used,
        tokens=total,
        corpus_hash=digest.hexdigest(),
        skipped=skipped,
        not_utf8=not_utf8,
    )
    if total == 0:
        notes = "; ".join(result.notes()) or "no files"
        raise OptionError("corpus", f"no usable text to count token frequencies on ({notes})")
    return result


def _decoded(
    data: bytes, path: Path, skipped: dict[str, list[str]], not_utf8: list[str]
) -> str | None:
    """The file's text, or None (recorded as skipped) when it is binary data, not text."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
    if text.count("\ufffd") > MAX_UNDECODABLE * max(len(text), 1):
        skipped.setdefault("undecodable", []).append(str(path))
        return None
    not_utf8.append(str(path))
    return text


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
