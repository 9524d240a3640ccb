"""Model and tokenizer fingerprints: what they compute, never how their files are laid out.

model fingerprint     = sha256(canonical JSON of the architecture allow-list, and of every
                        tensor's name, dtype, shape and sha256 of its bytes, sorted by name)
tokenizer fingerprint = sha256(canonical JSON of the backend's model (vocabulary and merges),
                        normalizer, pre-tokenizer, post-processor, decoder, added tokens with
                        their ids and flags, special tokens, chat template, and the special ids
                        it puts around a text)

Re-sharding, re-saving with another transformers version, another safetensors header order,
`is_local`/`name_or_path` keys or `model_max_length` change none of these. Tensor digests are
read straight from the safetensors files (memory-mapped, no torch) and cached per file by
(real path, size, mtime_ns), so a multi-GB model is hashed once (docs/formats.md has the cost).
Every artifact records `fingerprint_scheme`; one made under another scheme is refused with a
"re-run" message instead of being compared.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import json
import mmap
import os
import struct
import sys
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import orjson

from copilot_cli.core import lazy
from copilot_cli.core.artifacts import FINGERPRINT_SCHEME, sha256_file, write_json

torch = lazy.module("torch")
transformers = lazy.module("transformers")
safetensors_io = lazy.module("copilot_cli.core.safetensors_io")

__all__ = ["FINGERPRINT_SCHEME", "model_fingerprint", "tokenizer_fingerprint"]
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
# What the computation depends on. A key a model's config does not have is left out; values
# are read from the loaded config (defaults filled in by transformers), so a config.json that
# spells a default out and one that omits it fingerprint alike.
ARCHITECTURE_KEYS = (
    "model_type",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_act",
    "activation_function",
    "rms_norm_eps",
    "layer_norm_eps",
    "layer_norm_epsilon",
    "tie_word_embeddings",
    "max_position_embeddings",
    "n_positions",
    "sliding_window",
    "use_sliding_window",
    "max_window_layers",
    "layer_types",
    "attention_bias",
    "mlp_bias",
    "partial_rotary_factor",
    "rotary_dim",
    "attn_logit_softcapping",
    "final_logit_softcapping",
    "query_pre_attn_scalar",
    "scale_attn_weights",
    "scale_attn_by_inverse_layer_idx",
    "reorder_and_upcast_attn",
    "qk_layernorm",
    "num_experts",
    "num_experts_per_tok",
    "num_local_experts",
    "moe_intermediate_size",
    "norm_topk_prob",
)
ROPE_KEYS = ("rope_parameters", "rope_scaling", "rope_theta")
_BPE_DEFAULTS = {
    "dropout": None,
    "unk_token": None,
    "continuing_subword_prefix": None,
    "end_of_word_suffix": None,
    "fuse_unk": False,
    "byte_fallback": False,
    "ignore_merges": False,
}
_SPECIAL_NAMES = (
    "bos_token",
    "eos_token",
    "unk_token",
    "pad_token",
    "sep_token",
    "cls_token",
    "mask_token",
)


def cache_dir() -> Path:
    """Where copilot-opt keeps its caches (COPILOT_OPT_CACHE_DIR, else XDG cache)."""
    if env := os.environ.get("COPILOT_OPT_CACHE_DIR"):
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "copilot-opt"


def canonical(value: Any) -> str:
    """Compact JSON with sorted keys: one text for one value, on any machine.

    The text is json.dumps(sort_keys, ensure_ascii=False, compact)'s. orjson writes the same
    bytes ten times faster (a production tokenizer's description is tens of MB) for everything
    but floats, which it formats otherwise (1e-5 for 1e-05), and non-string keys, which it
    refuses: a value holding either goes through json."""
    if not _holds_float(value):
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode("utf-8")
        except (TypeError, orjson.JSONEncodeError):
            pass
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _holds_float(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return False


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class FileFactCache:
    """Facts about files (a sha256, tensor digests), remembered by (real path, size,
    mtime_ns) in a small JSON file; a file changed in place gets a new mtime and is redone.

    New facts are kept in memory and written once per batch (`flush`, called after each
    fingerprint and at exit), not once per file: rewriting the whole file for every new fact
    made a first walk over a large repository quadratic in its file count.
    """

    _instances: ClassVar[weakref.WeakSet] = weakref.WeakSet()

    def __init__(self, name: str = "file-hashes.json", path: Path | None = None) -> None:
        self._name = name
        self._path = path  # None: follow COPILOT_OPT_CACHE_DIR at the time of use
        self._entries: dict[str, dict[str, Any]] = {}
        self._loaded_from: Path | None = None
        self._dirty = False
        FileFactCache._instances.add(self)

    @property
    def path(self) -> Path:
        return self._path or cache_dir() / self._name

    def _load(self) -> dict[str, dict[str, Any]]:
        if self._loaded_from != self.path:
            self.flush()
            try:
                self._entries = json.loads(self.path.read_text())
            except (OSError, ValueError):
                self._entries = {}
            self._loaded_from = self.path
        return self._entries

    def get(self, file: Path, compute: Callable[[str], Any], key: str = "sha256") -> Any:
        real = os.path.realpath(file)
        stat = os.stat(real)
        entries = self._load()
        entry = entries.get(real)
        fresh = entry and entry["size"] == stat.st_size and entry["mtime_ns"] == stat.st_mtime_ns
        if fresh and key in entry:
            return entry[key]
        value = compute(real)
        kept = entry if fresh else {}
        entries[real] = {**kept, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, key: value}
        self._dirty = True
        return value

    def fact(self, key: str, compute: Callable[[], Any]) -> Any:
        """A fact about content that `key` names by its digest: computed once, then read."""
        entries = self._load()
        entry = entries.get(key)
        if isinstance(entry, dict) and "value" in entry:
            return entry["value"]
        value = compute()
        entries[key] = {"value": value}
        self._dirty = True
        return value

    def sha256(self, file: Path) -> str:
        return self.get(file, sha256_file)

    def flush(self) -> None:
        """Write the facts learnt since the last flush (a read-only cache only costs speed)."""
        if self._dirty and self._loaded_from is not None:
            with contextlib.suppress(OSError):
                write_json(self._loaded_from, self._entries)
            self._dirty = False


class FileHashCache(FileFactCache):
    """sha256 of files (what `tree_hashes` and the build manifest use)."""

    def __init__(self, path: Path | None = None) -> None:
        super().__init__("file-hashes.json", path)


@atexit.register
def _flush_all() -> None:
    for cache in list(FileFactCache._instances):
        cache.flush()


_default_cache = FileFactCache()
tensor_cache = FileFactCache("tensor-digests.json")
tokenizer_cache = FileFactCache("tokenizer-fingerprints.json")


# -- model ---------------------------------------------------------------------------------


def _rope(values: dict[str, Any]) -> dict[str, Any] | None:
    """RoPE settings in one shape whichever keys a transformers version spells them with."""
    merged: dict[str, Any] = {}
    for key in ("rope_scaling", "rope_parameters"):
        if isinstance(values.get(key), dict):
            merged.update(values[key])
    if values.get("rope_theta") is not None:
        merged.setdefault("rope_theta", values["rope_theta"])
    if not merged:
        return None
    if merged.get("type") and "rope_type" not in merged:
        merged["rope_type"] = merged.pop("type")
    merged.setdefault("rope_type", "default")
    merged.pop("type", None)
    return {k: merged[k] for k in sorted(merged)}


def architecture_config(config: Any) -> dict[str, Any]:
    """The allow-listed fields of a transformers config (or config dict) that define what the
    model computes (see ARCHITECTURE_KEYS), with RoPE settings in one canonical shape."""
    if hasattr(config, "to_dict"):
        values = {**config.to_dict()}
        for key in (*ARCHITECTURE_KEYS, *ROPE_KEYS):
            with contextlib.suppress(Exception):
                values[key] = getattr(config, key)
    else:
        values = dict(config)
    out = {key: values[key] for key in ARCHITECTURE_KEYS if values.get(key) is not None}
    rope = _rope(values)
    if rope is not None:
        out["rope"] = rope
    return out


def weight_files(folder: Path) -> list[Path]:
    """Weight files in a model folder, sorted by name (shard indexes are layout, not content)."""
    files = [p for p in folder.iterdir() if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES)]
    return sorted(files, key=lambda p: p.name)


def safetensors_tensor_digests(path: str) -> list[list[Any]]:
    """[name, dtype, shape, sha256 of the bytes] of every tensor in a safetensors file, read
    through a memory map (no copy, no torch)."""
    header, _ = safetensors_io.read_header(Path(path))
    digests = []
    with open(path, "rb") as handle, contextlib.ExitStack() as stack:
        size = os.fstat(handle.fileno()).st_size
        data = None
        if size:
            mapped = stack.enter_context(mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ))
            data = memoryview(mapped)
            stack.callback(data.release)
        base = 8 + struct.unpack("<Q", handle.read(8))[0]
        for name in sorted(header):
            entry = header[name]
            begin, end = entry["data_offsets"]
            digest = hashlib.sha256(data[base + begin : base + end] if data is not None else b"")
            digests.append([name, entry["dtype"], list(entry["shape"]), digest.hexdigest()])
    return digests


def _torch_file_digests(path: str) -> list[list[Any]]:
    """The same facts for a pickled state dict (.bin/.pt), read with torch (weights only)."""
    state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    return [
        _tensor_digest(name, t, safetensors_io.DTYPE_NAMES, safetensors_io.tensor_bytes)
        for name, t in sorted(state.items())
    ]


def _tensor_digest(name: str, tensor: Any, names: dict, to_bytes: Callable) -> list[Any]:
    return [
        name,
        names.get(tensor.dtype, str(tensor.dtype)),
        list(tensor.shape),
        hashlib.sha256(to_bytes(tensor)).hexdigest(),
    ]


def tensor_digests(folder: Path, cache: FileFactCache | None = None) -> list[list[Any]]:
    """Every tensor of a model folder, sorted by name, whatever the sharding."""
    cache = cache or tensor_cache
    tensors: dict[str, list[Any]] = {}
    for path in weight_files(folder):
        compute = (
            safetensors_tensor_digests if path.suffix == ".safetensors" else _torch_file_digests
        )
        for digest in cache.get(path, compute, key="tensors"):
            tensors.setdefault(digest[0], digest)
    cache.flush()
    return [tensors[name] for name in sorted(tensors)]


def _model_digest(architecture: dict[str, Any], tensors: list[list[Any]]) -> str:
    return _sha256(canonical({"architecture": architecture, "tensors": tensors}))


def model_fingerprint_from_folder(
    folder: Path, config: Any | None = None, cache: FileFactCache | None = None
) -> str:
    """Fingerprint a model saved in `folder`: its architecture and its tensors' contents."""
    if config is None:
        config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
    return _model_digest(architecture_config(config), tensor_digests(Path(folder), cache))


def model_fingerprint_from_weights(model: Any, *, saved_only: bool = False) -> str:
    """Fingerprint an in-memory model (no folder) the same way: a model and its saved folder
    agree whenever its state dict holds each tensor once. With `saved_only`, the tied copies
    `save_pretrained` leaves out (a tied output layer) are left out here too, so a model and the
    folder it is saved to always agree."""
    config = getattr(model, "config", None)
    state = model.state_dict()
    if saved_only:
        for name in _tied_names(model, state):
            state.pop(name, None)
    tensors = [
        _tensor_digest(
            name, tensor.detach(), safetensors_io.DTYPE_NAMES, safetensors_io.tensor_bytes
        )
        for name, tensor in sorted(state.items())
    ]
    return _model_digest(architecture_config(config) if config is not None else {}, tensors)


def _tied_names(model: Any, state: dict[str, Any]) -> list[str]:
    """State-dict names that are tied copies of another tensor (transformers' own list)."""
    if not getattr(getattr(model, "config", None), "tie_word_embeddings", False):
        return []
    tied = getattr(model, "_tied_weights_keys", None) or {}
    names = list(tied) if isinstance(tied, (dict, list, tuple)) else []
    return [n for n in names if n in state]


def model_fingerprint(model: Any) -> str:
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


# -- tokenizer -----------------------------------------------------------------------------


def _canonical_model(model: dict[str, Any]) -> dict[str, Any]:
    model = dict(model)
    if model.get("type") == "BPE":
        for key, default in _BPE_DEFAULTS.items():
            model.setdefault(key, default)
        merges = model.get("merges") or []
        model["merges"] = [m.split(" ", 1) if isinstance(m, str) else list(m) for m in merges]
    return model


def _added_tokens(tokens: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keys = ("id", "content", "special", "lstrip", "rstrip", "normalized", "single_word")
    return sorted(({k: t.get(k) for k in keys} for t in tokens), key=lambda t: t["id"])


def _specials_around(tokenizer: Any) -> list[list[int]]:
    """The ids the tokenizer puts before and after a text when adding special tokens."""
    probe = "x"
    plain = list(tokenizer(probe, add_special_tokens=False).input_ids)
    full = list(tokenizer(probe, add_special_tokens=True).input_ids)
    for start in range(len(full) - len(plain) + 1):
        if full[start : start + len(plain)] == plain:
            return [full[:start], full[start + len(plain) :]]
    return [full, []]


def tokenizer_description(tokenizer: Any) -> dict[str, Any]:
    """Everything about a tokenizer that changes token ids or rendered prompts, canonical."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        description = _backend_description(backend.to_str())
    else:  # a slow tokenizer: its vocabulary is what it has
        description = {
            "class": type(tokenizer).__name__,
            "vocab": sorted(tokenizer.get_vocab().items()),
        }
    return {**description, **_behaviour(tokenizer)}


def _backend_description(text: str) -> dict[str, Any]:
    """The fast tokenizer's own JSON (`backend_tokenizer.to_str()`), the parts that matter."""
    spec = json.loads(text)
    description: dict[str, Any] = {
        key: spec.get(key) for key in ("normalizer", "pre_tokenizer", "post_processor", "decoder")
    }
    description["truncation"] = spec.get("truncation")
    description["model"] = _canonical_model(spec.get("model") or {})
    description["added_tokens"] = _added_tokens(spec.get("added_tokens") or [])
    return description


def _behaviour(tokenizer: Any) -> dict[str, Any]:
    """What the tokenizer object adds to its backend: special tokens, chat template, the ids
    around a text."""
    special = {}
    for name in _SPECIAL_NAMES:
        token = getattr(tokenizer, name, None)
        if isinstance(token, str):
            special[name] = [token, tokenizer.convert_tokens_to_ids(token)]
    return {
        "special_tokens": special,
        "all_special_ids": sorted(getattr(tokenizer, "all_special_ids", []) or []),
        "chat_template": getattr(tokenizer, "chat_template", None),
        "specials_around": _specials_around(tokenizer),
    }


def backend_json(tokenizer: Any) -> str | None:
    """The fast tokenizer's own JSON (`backend_tokenizer.to_str()`, 0.1 s for a 150k
    vocabulary), read once per tokenizer object: the fingerprint and chunk's splitting rule
    both start from it. None without a fast backend."""
    with contextlib.suppress(TypeError):  # kept beside the object, never pickled with it
        cached = _BACKEND_JSON.get(tokenizer)
        if cached is not None:
            return cached
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not hasattr(backend, "to_str"):
        return None
    text = backend.to_str()
    with contextlib.suppress(TypeError):
        _BACKEND_JSON[tokenizer] = text
    return text


_BACKEND_JSON: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


# The files a Hugging Face tokenizer folder may load a tokenizer from (config.json too:
# transformers picks the tokenizer class by the model type it names); weights are not read.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "tokenizer.model",
    "config.json",
    "chat_template.jinja",
    "chat_template.json",
)
LOADED_FROM = "_copilot_loaded_from"  # set by core.models.load_tokenizer: the folder


def tokenizer_source_key(tokenizer: Any) -> str | None:
    """A digest of what made a tokenizer that core.models.load_tokenizer loaded from a local
    folder, read without serialising it: the folder's tokenizer files (by content, each
    remembered by path, size and mtime), the tokenizer's class, the transformers and
    tokenizers versions, its size and added tokens, and what it adds around a text. The same
    digest means the same loading of the same files, so facts derived from its backend JSON
    (the fingerprint, chunk's splitting rule) can be remembered by it and the 0.1 s
    serialisation skipped. None for any other tokenizer (a GGUF's, one a caller built or
    changed after loading: drop `_copilot_loaded_from` after changing one)."""
    cached = getattr(tokenizer, "_copilot_source_key", None)
    folder = getattr(tokenizer, LOADED_FROM, None)
    if cached or folder is None or not (Path(folder) / "tokenizer.json").is_file():
        return cached or None
    files = {}
    for name in TOKENIZER_FILES:
        if (Path(folder) / name).is_file():
            files[name] = tokenizer_cache.sha256(Path(folder) / name)
    versions = {
        m: getattr(sys.modules.get(m), "__version__", None) for m in ("transformers", "tokenizers")
    }
    facts = {
        "scheme": FINGERPRINT_SCHEME,
        "class": f"{type(tokenizer).__module__}.{type(tokenizer).__qualname__}",
        "versions": versions,
        "files": files,
        "size": len(tokenizer),
        "added": sorted(map(str, getattr(tokenizer, "get_added_vocab", dict)().items())),
        "behaviour": _behaviour(tokenizer),
    }
    key = _sha256(canonical(facts))
    with contextlib.suppress(AttributeError):
        tokenizer._copilot_source_key = key
    return key


def forget_tokenizer_facts(tokenizer: Any) -> None:
    """Drop what this process remembers of `tokenizer` (its JSON, fingerprint, source key and
    chunk rule): the next use pays what a fresh process pays (a benchmark's set-up)."""
    with contextlib.suppress(TypeError):
        _BACKEND_JSON.pop(tokenizer, None)
    for kept in ("_copilot_chunk_rule", "_copilot_tokenizer_fingerprint", "_copilot_source_key"):
        with contextlib.suppress(AttributeError):
            delattr(tokenizer, kept)


def tokenizer_fingerprint(tokenizer: Any, cache: Any = None) -> str:
    """Fingerprint a tokenizer by what it does (see `tokenizer_description`); cached on it, and
    for a fast tokenizer remembered by a digest of its backend JSON and the rest of its
    description (`cache`, default the tokenizer-fingerprints cache): a production tokenizer's
    description takes half a second to build, its digest a few milliseconds."""
    cached = getattr(tokenizer, "_copilot_tokenizer_fingerprint", None)
    if cached:
        return cached
    backend = getattr(tokenizer, "backend_tokenizer", None)
    store = cache or tokenizer_cache
    source = tokenizer_source_key(tokenizer) if backend is not None else None
    if backend is None:
        value = _sha256(canonical(tokenizer_description(tokenizer)))
    else:  # loaded from files seen before: remembered by them, no serialisation
        derive = functools.partial(_from_backend, tokenizer, store)
        value = store.fact(f"tokenizer-source:{source}", derive) if source else derive()
        store.flush()
    with contextlib.suppress(AttributeError):
        tokenizer._copilot_tokenizer_fingerprint = value
    return value


def _from_backend(tokenizer: Any, store: FileFactCache) -> str:
    """The fingerprint from the backend JSON (remembered by a digest of it)."""
    text, behaviour = backend_json(tokenizer), _behaviour(tokenizer)
    key = _sha256(f"{FINGERPRINT_SCHEME}\0{text}\0{canonical(behaviour)}")
    return store.fact(
        f"tokenizer:{key}",
        lambda: _sha256(canonical({**_backend_description(text), **behaviour})),
    )
