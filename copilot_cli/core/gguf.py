"""GGUF files as models: `--model model.gguf` (or a folder holding one) wherever a model folder
works. transformers reads the file (with the `gguf` package) and dequantizes every tensor.

The fingerprint of a GGUF model is the fingerprint of what it computes, like every other: its
architecture and its dequantized tensors, each tensor once (a tied output layer is not a
second tensor), exactly as `model_fingerprint_from_folder` would find them in the safetensors
folder `save_pretrained` writes. A GGUF file and the folder converted from it therefore share
one fingerprint, and an artifact made with one is accepted with the other. It is computed once
per file (cached by real path, size and mtime), from the float32 tensors transformers builds,
whatever `--dtype` the model is then placed in.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from copilot_cli.core import lazy
from copilot_cli.core.errors import ModelLoadError
from copilot_cli.core.fingerprints import model_fingerprint_from_weights, tensor_cache

gguf = lazy.module("gguf")
transformers = lazy.module("transformers")
tokenizers = lazy.module("tokenizers")
gguf_utils = lazy.module("transformers.modeling_gguf_pytorch_utils")

SUFFIX = ".gguf"
MAGIC = b"GGUF"
FINGERPRINT_KEY = "gguf-model-fingerprint-v1"


def gguf_file(name_or_path: str) -> Path | None:
    """The GGUF file `name_or_path` names: the file itself, or the one `.gguf` in a folder
    that has no config.json. None for anything else (a model folder, a hub id)."""
    path = Path(name_or_path).expanduser()
    if path.is_file() and path.suffix.lower() == SUFFIX:
        return path
    if path.is_dir() and not (path / "config.json").exists():
        found = sorted(p for p in path.iterdir() if p.suffix.lower() == SUFFIX and p.is_file())
        if len(found) > 1:
            names = ", ".join(p.name for p in found[:3])
            raise ModelLoadError(f"holds several GGUF files ({names}): name one", where=str(path))
        if found:
            return found[0]
    if path.suffix.lower() == SUFFIX and not path.exists():
        raise ModelLoadError("GGUF file does not exist", where=str(path))
    return None


def check_gguf(path: Path, *, tensors: bool = True) -> None:
    """Refuse a file that is not GGUF or is cut short (or, with `tensors`, holds no weights:
    a vocab-only file), before transformers reads it."""
    try:
        with path.open("rb") as handle:
            head = handle.read(24)
            size = handle.seek(0, 2)
    except OSError as exc:
        raise ModelLoadError(f"cannot read ({exc.strerror})", where=str(path)) from None
    if len(head) < 24 or head[:4] != MAGIC:
        raise ModelLoadError("not a GGUF file (no GGUF magic)", where=str(path))
    version, count, _ = struct.unpack("<IQQ", head[4:24])
    if version not in (2, 3):
        raise ModelLoadError(f"unsupported GGUF version {version}", where=str(path))
    if tensors and count == 0:
        raise ModelLoadError("holds no tensors (a vocab-only GGUF file?)", where=str(path))
    try:
        reader = gguf.GGUFReader(str(path))
        end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
    except Exception as exc:  # the reader raises many types on a damaged file
        raise ModelLoadError(f"damaged GGUF file ({_first_line(exc)})", where=str(path)) from None
    if end > size:
        raise ModelLoadError(f"truncated GGUF file ({size} of {end} bytes)", where=str(path))


def load_gguf_model(path: Path, dtype: Any) -> Any:
    """The causal LM in a GGUF file, dequantized (float32), then cast to `dtype` if given."""
    check_gguf(path)
    try:
        with _no_tqdm():  # transformers draws its own bar while it dequantizes
            model = transformers.AutoModelForCausalLM.from_pretrained(
                path.parent, gguf_file=path.name
            )
    except Exception as exc:
        raise ModelLoadError(
            f"cannot load the model ({_first_line(exc)})", where=str(path)
        ) from exc
    model._copilot_model_fingerprint = gguf_fingerprint(path, model)
    if dtype is not None:
        model.to(dtype)
    return model


def load_gguf_tokenizer(path: Path) -> Any:
    """The tokenizer a GGUF file holds, as transformers rebuilds it."""
    check_gguf(path, tensors=False)
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    except Exception as exc:
        raise ModelLoadError(
            f"cannot load its tokenizer ({_first_line(exc)})", where=str(path)
        ) from exc
    as_llama_cpp(tokenizer, _metadata(path, "tokenizer.ggml.model"), _metadata(path, PRE_KEY))
    return tokenizer


PRE_KEY = "tokenizer.ggml.pre"
# What llama.cpp's pre-tokenizer types do that transformers' GGUF conversion leaves out (it
# gives every byte-level vocabulary GPT-2's regex alone). The regexes are llama.cpp's own
# (src/llama-vocab.cpp); with them every vocab file of llama.cpp's test set gives llama.cpp's
# reference ids exactly (tests/real/test_tokenizers.py).
_DIGITS_FIRST = ("starcoder", "refact", "smollm", "command-r", "codeshell")
_DEEPSEEK_CODER = (r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[一-龥ࠀ-一가-퟿]+", r"\p{N}")


def as_llama_cpp(tokenizer: Any, vocab_model: str | None, pre: str | None) -> None:
    """Make a tokenizer transformers rebuilt from GGUF split text as llama.cpp does."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return

    def split(pattern: str) -> Any:
        return tokenizers.pre_tokenizers.Split(tokenizers.Regex(pattern), "isolated")

    if pre in _DIGITS_FIRST:
        byte_level = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        backend.pre_tokenizer = tokenizers.pre_tokenizers.Sequence([split(r"\p{N}"), byte_level])
    elif pre == "deepseek-coder":
        byte_level = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        backend.pre_tokenizer = tokenizers.pre_tokenizers.Sequence(
            [*map(split, _DEEPSEEK_CODER), byte_level]
        )
    elif pre in ("llama-bpe", "llama3"):
        backend.model.ignore_merges = True  # a piece that is a whole vocabulary entry stays one
    elif vocab_model == "llama":  # SentencePiece: a space before the text, spaces as ▁
        backend.normalizer = tokenizers.normalizers.Sequence(
            [tokenizers.normalizers.Prepend("▁"), tokenizers.normalizers.Replace(" ", "▁")]
        )
        backend.pre_tokenizer = None
    with contextlib.suppress(AttributeError):
        del tokenizer._copilot_tokenizer_fingerprint


def _metadata(path: Path, key: str) -> str | None:
    """A string field of a GGUF file's metadata (None when absent)."""
    field = gguf.GGUFReader(str(path)).fields.get(key)
    if field is None or not field.data:
        return None
    try:
        return bytes(field.parts[field.data[0]]).decode("utf-8")
    except (UnicodeDecodeError, TypeError, ValueError):
        return None


def gguf_fingerprint(path: Path, model: Any) -> str:
    """The model fingerprint of a GGUF file's dequantized model (see the module docstring)."""

    def compute(_: str) -> str:
        return model_fingerprint_from_weights(model, saved_only=True)

    value = tensor_cache.get(path, compute, key=FINGERPRINT_KEY)
    tensor_cache.flush()
    return value


@contextlib.contextmanager
def _no_tqdm() -> Iterator[None]:
    """transformers' dequantization loop draws a tqdm bar on stderr (our CLI owns stderr;
    tqdm reads TQDM_DISABLE only when it is imported): the loop gets a plain iterator."""
    kept = gguf_utils.tqdm
    gguf_utils.tqdm = lambda items, **_: items
    try:
        yield
    finally:
        gguf_utils.tqdm = kept


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def copilot_keys(path: Path) -> dict[str, Any]:
    """The `copilot-opt.*` metadata keys a GGUF holds (a quantize --export's provenance)."""
    reader = gguf.GGUFReader(str(path))
    return {k: f.contents() for k, f in reader.fields.items() if k.startswith("copilot-opt.")}
