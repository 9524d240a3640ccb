"""Model and tokenizer fingerprints: what every artifact records and checks on load.

model fingerprint     = sha256(canonical architecture config ‖ sha256 of each weight file)
tokenizer fingerprint = sha256(sha256 of each tokenizer file ‖ special tokens)

Hashing multi-GB weights on every run is too slow, so file hashes are cached on disk keyed by
(real path, size, mtime_ns); a file that changes in place gets a new mtime and is rehashed.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import weakref
from pathlib import Path
from typing import Any, ClassVar

import torch

from copilot_cli.core.artifacts import canonical_json, sha256_file, write_json

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
)
# Config keys that describe how a file was saved, not what the model computes.
_VOLATILE_CONFIG_KEYS = {
    "transformers_version",
    "_name_or_path",
    "_commit_hash",
    "dtype",
    "torch_dtype",
    "use_cache",
    "architectures",
    "output_attentions",
    "output_hidden_states",
    "return_dict",
}


def cache_dir() -> Path:
    """Where copilot-opt keeps its caches (COPILOT_OPT_CACHE_DIR, else XDG cache)."""
    if env := os.environ.get("COPILOT_OPT_CACHE_DIR"):
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "copilot-opt"


class FileHashCache:
    """sha256 of files, remembered by (real path, size, mtime_ns) in a small JSON file.

    New hashes are kept in memory and written once per batch (`flush`, called after each
    fingerprint and at exit), not once per file: rewriting the whole file for every new hash
    made a first walk over a large repository quadratic in its file count.
    """

    _instances: ClassVar[weakref.WeakSet] = weakref.WeakSet()

    def __init__(self, path: Path | None = None) -> None:
        self._path = path  # None: follow COPILOT_OPT_CACHE_DIR at the time of use
        self._entries: dict[str, dict[str, Any]] = {}
        self._loaded_from: Path | None = None
        self._dirty = False
        FileHashCache._instances.add(self)

    @property
    def path(self) -> Path:
        return self._path or cache_dir() / "file-hashes.json"

    def _load(self) -> dict[str, dict[str, Any]]:
        if self._loaded_from != self.path:
            self.flush()
            try:
                self._entries = json.loads(self.path.read_text())
            except (OSError, ValueError):
                self._entries = {}
            self._loaded_from = self.path
        return self._entries

    def sha256(self, file: Path) -> str:
        real = os.path.realpath(file)
        stat = os.stat(real)
        entries = self._load()
        entry = entries.get(real)
        if entry and entry["size"] == stat.st_size and entry["mtime_ns"] == stat.st_mtime_ns:
            return entry["sha256"]
        digest = sha256_file(real)
        entries[real] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest}
        self._dirty = True
        return digest

    def flush(self) -> None:
        """Write the hashes learnt since the last flush (a read-only cache only costs speed)."""
        if self._dirty and self._loaded_from is not None:
            with contextlib.suppress(OSError):
                write_json(self._loaded_from, self._entries)
            self._dirty = False


@atexit.register
def _flush_all() -> None:
    for cache in list(FileHashCache._instances):
        cache.flush()


_default_cache = FileHashCache()


def _digest(parts: list[tuple[str, str]]) -> str:
    digest = hashlib.sha256()
    for name, value in parts:
        digest.update(f"{name}={value}\n".encode())
    return digest.hexdigest()


def architecture_config(config: Any) -> dict[str, Any]:
    """The parts of a transformers config that define the computation."""
    values = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    return {k: v for k, v in values.items() if k not in _VOLATILE_CONFIG_KEYS}


def weight_files(folder: Path) -> list[Path]:
    """Weight files (and shard indexes) in a model folder, sorted by name."""
    files = [p for p in folder.iterdir() if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES)]
    files += [p for p in folder.glob("*.index.json") if p.is_file()]
    return sorted(set(files), key=lambda p: p.name)


def model_fingerprint_from_folder(
    folder: Path, config: Any, cache: FileHashCache | None = None
) -> str:
    """Fingerprint a model saved in `folder` from its config and weight-file hashes."""
    cache = cache or _default_cache
    parts = [("config", canonical_json(architecture_config(config)))]
    parts += [(f"file:{p.name}", cache.sha256(p)) for p in weight_files(folder)]
    cache.flush()
    return _digest(parts)


def model_fingerprint_from_weights(model: torch.nn.Module) -> str:
    """Fingerprint an in-memory model (no folder): config plus a hash of every parameter."""
    digest = hashlib.sha256()
    config = getattr(model, "config", None)
    if config is not None:
        digest.update(canonical_json(architecture_config(config)).encode())
    for name, tensor in sorted(model.state_dict().items()):
        data = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}:{data.dtype}:{tuple(data.shape)}\n".encode())
        digest.update(data.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def model_fingerprint(model: torch.nn.Module) -> str:
    """The fingerprint of `model`: from its folder when it was loaded from one, else its weights.

    Models loaded through `copilot_cli.core.models.load_model` carry the value computed at load
    time, so later in-place changes (a quantized embedding) do not change what they claim to be.
    """
    cached = getattr(model, "_copilot_model_fingerprint", None)
    if cached:
        return cached
    folder = Path(str(getattr(getattr(model, "config", None), "_name_or_path", "") or ""))
    if str(folder) not in ("", ".") and folder.is_dir() and weight_files(folder):
        value = model_fingerprint_from_folder(folder, model.config)
    else:
        value = model_fingerprint_from_weights(model)
    with contextlib.suppress(AttributeError):
        model._copilot_model_fingerprint = value
    return value


def _special_tokens(tokenizer: Any) -> str:
    special = getattr(tokenizer, "special_tokens_map", {}) or {}
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    added_list = sorted((int(i), str(getattr(t, "content", t))) for i, t in added.items())
    return json.dumps({"special": special, "added": added_list}, sort_keys=True, default=str)


def tokenizer_fingerprint(tokenizer: Any, cache: FileHashCache | None = None) -> str:
    """Fingerprint a tokenizer from its files (when loaded from a folder) and special tokens."""
    cached = getattr(tokenizer, "_copilot_tokenizer_fingerprint", None)
    if cached:
        return cached
    cache = cache or _default_cache
    parts: list[tuple[str, str]] = [("special", _special_tokens(tokenizer))]
    folder = Path(str(getattr(tokenizer, "name_or_path", "") or ""))
    files = [folder / n for n in TOKENIZER_FILES] if folder.is_dir() else []
    files = [p for p in files if p.is_file()]
    if files:
        parts += [(f"file:{p.name}", cache.sha256(p)) for p in files]
        cache.flush()
    elif hasattr(tokenizer, "backend_tokenizer"):
        parts.append(
            ("backend", hashlib.sha256(tokenizer.backend_tokenizer.to_str().encode()).hexdigest())
        )
        parts.append(("chat_template", str(getattr(tokenizer, "chat_template", None))))
    else:
        vocab = json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False)
        parts.append(("vocab", hashlib.sha256(vocab.encode()).hexdigest()))
    value = _digest(parts)
    with contextlib.suppress(AttributeError):
        tokenizer._copilot_tokenizer_fingerprint = value
    return value
