"""llama.cpp slot files prepared offline: the folder, its index and its checks (no llama.cpp
import here; serving/llamacpp.py computes and restores them).

    KV_DIR/slots.json          the index, sealed by a digest (docs/formats.md)
    KV_DIR/slots/<sha>.bin     per static prefix, what llama.cpp's `llama_state_seq_save_file`
                               wrote after computing it: the format llama-server's
                               `POST /slots/{id}?action=save` writes and `action=restore` reads

The index records the GGUF file (name, size, sha256), the tokenizer fingerprint (sha256 of
llama.cpp's own vocabulary: every token's text and type in id order), the llama.cpp build, and
per prefix its token ids, file, size and sha256. A slot file holds raw KV for one model and
one llama.cpp build: anything else is refused before a restore.

Version 2 adds chunk slots (`prefill-kv --engine llama.cpp --chunks`): `kind` "chunk" and
`lead_tokens` (the canonical lead every chunk is computed after, as in a KV folder's index);
a version-1 index (prefixes only) is still read.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from copilot_cli.core.artifacts import check_sealed, sha256_file
from copilot_cli.core.errors import ArtifactError, CopilotError, FingerprintMismatch
from copilot_cli.core.inspection import Expected, Inspection, Problem

FORMAT = "copilot-opt.llamacpp-slots"
FORMAT_VERSION = 2
READ_VERSIONS = (1, 2)
INDEX = "slots.json"
SLOTS = "slots"


@dataclass(frozen=True)
class SlotPrefix:
    name: str
    token_ids: tuple[int, ...]
    file: str  # relative to the folder
    bytes: int
    sha256: str
    kind: str = "prefix"  # "chunk": a snippet's KV after `lead_tokens` of canonical lead
    lead_tokens: int = 0


@dataclass(frozen=True)
class SlotIndex:
    gguf_name: str
    gguf_bytes: int
    gguf_sha256: str
    tokenizer_fingerprint: str
    llama_cpp_version: str
    prefixes: tuple[SlotPrefix, ...]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["prefixes"] = [{**asdict(p), "token_ids": list(p.token_ids)} for p in self.prefixes]
        return {"format": FORMAT, "format_version": FORMAT_VERSION, **out}

    def longest(self, tokens: list[int]) -> SlotPrefix | None:
        """The longest stored prefix that starts `tokens` and leaves at least one token of them
        to compute (a request needs its last token's logits). Chunks are no prefixes."""
        fits = [
            p
            for p in self.prefixes
            if p.kind == "prefix"
            and len(p.token_ids) < len(tokens)
            and tuple(tokens[: len(p.token_ids)]) == p.token_ids
        ]
        return max(fits, key=lambda p: len(p.token_ids), default=None)


def read_index(folder: Path) -> SlotIndex:
    """slots.json, its digest, format and shape checked (no slot file is read).

    Raises:
        ArtifactError: missing, not sealed, another format or version, malformed.
    """
    where = str(folder / INDEX)
    try:
        data = json.loads((folder / INDEX).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"unreadable ({type(exc).__name__})", where=where) from None
    if not isinstance(data, dict):
        raise ArtifactError("not a JSON object", where=where)
    check_sealed(data, where=where)
    if data.get("format") != FORMAT or data.get("format_version") not in READ_VERSIONS:
        raise ArtifactError(
            f"not a {FORMAT} v{FORMAT_VERSION} index (format {data.get('format')!r}, "
            f"version {data.get('format_version')!r})",
            where=where,
        )
    try:
        prefixes = tuple(
            SlotPrefix(
                str(p["name"]), tuple(int(t) for t in p["token_ids"]), str(p["file"]),
                int(p["bytes"]), str(p["sha256"]), p.get("kind", "prefix"),
                p.get("lead_tokens", 0),
            )
            for p in data["prefixes"]
        )  # fmt: skip
        fields = ("gguf_name", "gguf_sha256", "tokenizer_fingerprint", "llama_cpp_version")
        values = {key: str(data[key]) for key in fields}
        index = SlotIndex(**values, gguf_bytes=int(data["gguf_bytes"]), prefixes=prefixes)
    except (KeyError, TypeError, ValueError) as exc:
        raise ArtifactError(f"malformed index ({exc})", where=where) from None
    leads: set[tuple[int, ...]] = set()
    for prefix in prefixes:
        if Path(prefix.file).is_absolute() or ".." in Path(prefix.file).parts:
            raise ArtifactError(f"prefix {prefix.name}: file outside the folder", where=where)
        _check_kind(prefix, where)
        if prefix.kind == "chunk":
            leads.add(prefix.token_ids[: prefix.lead_tokens])
    if len(leads) > 1:
        raise ArtifactError("its chunks have different leads (one lead a folder)", where=where)
    return index


def _check_kind(prefix: SlotPrefix, where: str) -> None:
    """A prefix has no lead; a chunk's lead is 1..tokens-1 tokens (as in a KV folder)."""
    lead = prefix.lead_tokens
    if prefix.kind not in ("prefix", "chunk") or type(lead) is not int:
        raise ArtifactError(f"{prefix.name}: kind or lead_tokens malformed", where=where)
    if prefix.kind == "prefix" and lead != 0:
        raise ArtifactError(f"{prefix.name}: a prefix has no lead_tokens", where=where)
    if prefix.kind == "chunk" and not 0 < lead < len(prefix.token_ids):
        raise ArtifactError(
            f"{prefix.name}: lead_tokens {lead} outside 1..{len(prefix.token_ids) - 1}", where=where
        )


def check_model(index: SlotIndex, gguf: Path, tokenizer_fingerprint: str, where: str) -> None:
    """Refuse slots made for another GGUF file or tokenizer.

    Raises:
        FingerprintMismatch: another model file (sha256) or vocabulary.
    """
    found = sha256_file(gguf)
    if index.gguf_sha256 != found:
        raise FingerprintMismatch("model", expected=found, found=index.gguf_sha256, where=where)
    if index.tokenizer_fingerprint != tokenizer_fingerprint:
        raise FingerprintMismatch(
            "tokenizer", expected=tokenizer_fingerprint, found=index.tokenizer_fingerprint,
            where=where,
        )  # fmt: skip


def verified_slot(folder: Path, prefix: SlotPrefix) -> Path:
    """The slot file of `prefix`, its size and sha256 checked.

    Raises:
        ArtifactError: missing or damaged.
    """
    path = folder / prefix.file
    if not path.is_file():
        raise ArtifactError(f"slot file of {prefix.name} is missing", where=str(path))
    if path.stat().st_size != prefix.bytes or sha256_file(path) != prefix.sha256:
        raise ArtifactError(f"slot file of {prefix.name} is damaged (sha256)", where=str(path))
    return path


def inspect_slot_folder(path: Path, *, verify: bool = True, expected: Expected) -> Inspection:
    """Describe a slot folder; with `verify`, check the index and every slot file."""
    index = read_index(path)
    info = {
        "gguf": index.gguf_name,
        "gguf_sha256": index.gguf_sha256,
        "tokenizer_fingerprint": index.tokenizer_fingerprint,
        "llama_cpp": index.llama_cpp_version,
        "prefixes": [
            {"name": p.name, "tokens": len(p.token_ids)}
            for p in index.prefixes
            if p.kind == "prefix"
        ],
        "chunks": sum(p.kind == "chunk" for p in index.prefixes),
        "bytes": sum(p.bytes for p in index.prefixes),
    }
    problems: list[Problem] = []
    if verify:
        for prefix in index.prefixes:
            try:
                verified_slot(path, prefix)
            except CopilotError as exc:
                problems.append(Problem(prefix.file, exc.message))
    return Inspection(str(path), "llama.cpp slots", info, verify, problems)
