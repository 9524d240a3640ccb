"""chunk's splitting rule for a tokenizer: its pre-tokenizer family (families.py), its added
tokens' texts and the bytes of each token id, all derived from the backend JSON, which costs
0.1-0.4 s to serialise and parse for a 150k vocabulary: more than chunking a small repository.
A tokenizer that core.models.load_tokenizer loaded from a folder has a source key
(core.fingerprints.tokenizer_source_key: its files, class, versions); the rule is remembered
on disk under that key, with a digest of the code that derives it, and read back in about a
millisecond. Any other tokenizer derives it every time."""

from __future__ import annotations

import functools
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from copilot_cli.chunking.families import FAMILIES, Family, family_of
from copilot_cli.core.cached_arrays import read_arrays, write_arrays
from copilot_cli.core.fingerprints import backend_json, cache_dir, tokenizer_source_key

RULES_FOLDER = "chunk-rules"


def _byte_lengths(vocab: dict[str, int], family: Family) -> Any:
    """Bytes per token id of a byte-level BPE vocabulary (the model's, from tokenizer.json: one
    byte per symbol; SentencePiece: "▁" one space, <0xNN> one byte, other characters their
    UTF-8 bytes); -1 for ids that are not plain vocabulary entries (added tokens: such files
    use offsets)."""
    size: Any = len
    if family.prepend:

        def size(token: str) -> int:
            if _BYTE_TOKEN.fullmatch(token):
                return 1
            return len(token.replace("\u2581", " ").encode("utf-8"))

    ids = np.fromiter(vocab.values(), dtype=np.int64, count=len(vocab))
    table = np.full(int(ids.max(initial=-1)) + 1, -1, dtype=np.int64)
    table[ids] = np.fromiter(map(size, vocab), dtype=np.int64, count=len(vocab))
    return table


_BYTE_TOKEN = re.compile(r"<0x[0-9A-F]{2}>")


def splitting_rule(tokenizer: Any) -> tuple[Family | None, tuple[str, ...], dict[str, int]]:
    """(the pre-tokenizer family whose pieces may be cached and counts derived, or None; the
    added tokens' texts; the model's vocabulary), from one read of tokenizer.json (the one
    the fingerprint reads too)."""

    try:
        text = backend_json(tokenizer)
        spec = json.loads(text) if text is not None else None
    except (AttributeError, ValueError):
        spec = None
    if not isinstance(spec, dict):
        return None, (), {}
    added = tuple(t["content"] for t in spec.get("added_tokens") or [] if t.get("content"))
    vocab = (spec.get("model") or {}).get("vocab")
    return family_of(spec), added, vocab if isinstance(vocab, dict) else {}


def chunk_rule(tokenizer: Any) -> tuple[Family | None, tuple[str, ...], Any]:
    """(family or None, added tokens' texts, bytes per token id or None): read back when this
    tokenizer's files were seen before, else derived (and remembered when it has a source)."""
    key = tokenizer_source_key(tokenizer)
    path = None if key is None else cache_dir() / RULES_FOLDER / f"{key}-{_code_digest()}.npz"
    if path is not None:
        known = _read(path)
        if known is not None:
            return known
    family, added, vocab = splitting_rule(tokenizer)
    lengths = None if family is None else _byte_lengths(vocab, family)
    if path is not None:
        _write(path, family, added, lengths)
    return family, added, lengths


@functools.cache
def _code_digest() -> str:
    """The code that derives a rule (this module and families.py): a change makes new rules."""
    here = Path(__file__).resolve()
    digest = hashlib.sha256()
    for source in (here, here.with_name("families.py")):
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


def _read(path: Path) -> tuple[Family | None, tuple[str, ...], Any] | None:
    stored = read_arrays(path)
    if stored is None:
        return None
    try:
        meta = json.loads(str(stored["meta"]))
        family = FAMILIES[meta["family"]] if meta["family"] is not None else None
        return family, tuple(meta["added"]), stored["lengths"] if family is not None else None
    except (TypeError, ValueError, KeyError):  # not a rule: derive again
        return None


def _write(path: Path, family: Family | None, added: tuple[str, ...], lengths: Any) -> None:
    meta = json.dumps({"family": family and family.name, "added": list(added)})
    empty = np.zeros(0, dtype=np.int64)
    write_arrays(path, {"meta": np.array(meta), "lengths": empty if lengths is None else lengths})
