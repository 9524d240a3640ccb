"""Load a causal LM and its tokenizer, offline by default, with clear errors and fingerprints."""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from copilot_cli.core import lazy
from copilot_cli.core.errors import ArtifactError, ModelLoadError
from copilot_cli.core.fingerprints import (
    LOADED_FROM,
    model_fingerprint_from_folder,
    tokenizer_fingerprint,
    weight_files,
)
from copilot_cli.core.gguf import gguf_file, load_gguf_model, load_gguf_tokenizer
from copilot_cli.core.modelspec import ModelSpec, check_device, default_model
from copilot_cli.paths import SHIPPED_MODEL

torch = lazy.module("torch")
huggingface_hub = lazy.module("huggingface_hub")
modeling_auto = lazy.module("transformers.models.auto.modeling_auto")
transformers = lazy.module("transformers")
hf_logging = lazy.module("transformers.utils.logging")
safetensors_io = lazy.module("copilot_cli.core.safetensors_io")

__all__ = [
    "SHIPPED_MODEL",
    "LoadedModel",
    "ModelSpec",
    "check_device",
    "context_length",
    "default_model",
    "load_model",
    "load_tokenizer",
]


def _dtypes() -> dict[str, Any]:
    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def __getattr__(name: str) -> Any:
    """DTYPES (name -> torch dtype) and DTYPE_NAMES (the one table, both ways), made on first
    use: a command that only tokenizes (chunk, context) never imports torch."""
    if name == "DTYPES":
        return _dtypes()
    if name == "DTYPE_NAMES":
        return {dtype: key for key, dtype in _dtypes().items()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class LoadedModel:
    """A model, its tokenizer, and the fingerprints every artifact records."""

    model: Any
    tokenizer: Any
    model_fingerprint: str
    tokenizer_fingerprint: str
    source: str

    @property
    def config(self) -> Any:
        return self.model.config

    @property
    def device(self) -> Any:
        return next(self.model.parameters()).device


def _is_local(name: str) -> bool:
    path = Path(name)
    return path.exists() or path.is_absolute() or name.startswith((".", "~")) or name.count("/") > 1


def resolve_folder(name: str, *, allow_download: bool, what: str = "model") -> Path:
    """A local folder for `name`: the folder itself, or the hub snapshot (cached or downloaded)."""
    if _is_local(name):
        path = Path(name).expanduser()
        if not path.exists():
            raise ModelLoadError(f"{what} folder does not exist", where=name)
        if not path.is_dir():
            raise ModelLoadError(f"expected a {what} folder, found a file", where=name)
        return path
    try:
        return Path(huggingface_hub.snapshot_download(name, local_files_only=not allow_download))
    except Exception as exc:  # the hub client raises many types; all mean "not available"
        hint = "" if allow_download else " (offline by default; --allow-download fetches it)"
        raise ModelLoadError(
            f"neither a local folder nor a cached hub {what}{hint}", where=name
        ) from exc


def _check_model_folder(folder: Path) -> dict[str, Any]:
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise ModelLoadError("no config.json: not a Hugging Face model folder", where=str(folder))
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise ModelLoadError(f"config.json is not valid JSON ({exc})", where=str(folder)) from None
    if not isinstance(config, dict):
        raise ModelLoadError("config.json must be a JSON object", where=str(folder))
    model_type = config.get("model_type")
    if model_type not in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise ModelLoadError(
            f"model_type {model_type!r} is not a causal language model", where=str(folder)
        )
    architectures = config.get("architectures") or []
    causal_names = set(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
    if architectures and not any(
        name in causal_names or name.endswith(("ForCausalLM", "LMHeadModel"))
        for name in architectures
    ):
        raise ModelLoadError(
            f"architecture {', '.join(architectures)} is not a causal language model",
            where=str(folder),
        )
    weights = weight_files(folder)
    if not weights:
        raise ModelLoadError("no weight files (*.safetensors, *.bin)", where=str(folder))
    for path in weights:
        if path.suffix == ".safetensors":
            try:
                safetensors_io.read_header(path)
            except ArtifactError as exc:
                raise ModelLoadError(exc.message, where=str(path)) from exc
    return config


def load_tokenizer(name_or_path: str, *, allow_download: bool = False) -> Any:
    """Load a tokenizer from a folder, a GGUF file or a hub id, offline unless allowed."""
    gguf = gguf_file(name_or_path)
    if gguf is not None:
        tokenizer = load_gguf_tokenizer(gguf)
        tokenizer_fingerprint(tokenizer)
        return tokenizer
    folder = resolve_folder(name_or_path, allow_download=allow_download, what="tokenizer")
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except Exception as exc:
        raise ModelLoadError(f"cannot load a tokenizer ({exc})", where=str(folder)) from exc
    setattr(tokenizer, LOADED_FROM, str(folder))  # facts about it are remembered by its files
    tokenizer_fingerprint(tokenizer)
    return tokenizer


def load_model(spec: ModelSpec) -> LoadedModel:
    """Load the causal LM and tokenizer described by `spec`, in eval mode, with fingerprints.

    Raises:
        ModelLoadError: missing folder, no model in it, a non-causal model, damaged weights.
    """
    quiet_transformers()
    gguf = gguf_file(spec.name_or_path)
    if gguf is not None:
        return _load_gguf(spec, gguf)
    folder = resolve_folder(spec.name_or_path, allow_download=spec.allow_download)
    _check_model_folder(folder)
    device = check_device(spec.device)
    try:
        config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
        kwargs: dict[str, Any] = {"local_files_only": True}
        kwargs["dtype"] = _dtypes()[spec.dtype] if spec.dtype != "auto" else "auto"
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    except Exception as exc:
        raise ModelLoadError(
            f"cannot load the model ({_first_line(exc)})", where=str(folder)
        ) from exc
    model.to(device).eval()
    fingerprint = model_fingerprint_from_folder(folder, config)
    model._copilot_model_fingerprint = fingerprint
    tokenizer = load_tokenizer(spec.tokenizer or str(folder), allow_download=spec.allow_download)
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        model_fingerprint=fingerprint,
        tokenizer_fingerprint=tokenizer_fingerprint(tokenizer),
        source=str(folder),
    )


def _load_gguf(spec: ModelSpec, path: Path) -> LoadedModel:
    """A GGUF file as a model: dequantized by transformers, fingerprinted by what it computes."""
    device = check_device(spec.device)
    model = load_gguf_model(path, _dtypes()[spec.dtype] if spec.dtype != "auto" else None)
    model.to(device).eval()
    tokenizer = load_tokenizer(spec.tokenizer or str(path), allow_download=spec.allow_download)
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        model_fingerprint=model._copilot_model_fingerprint,
        tokenizer_fingerprint=tokenizer_fingerprint(tokenizer),
        source=str(path),
    )


_CACHE_KWARG: dict[type, str] = {}


def cache_kwargs(model: Any, cache: Any) -> dict[str, Any]:
    """`{name: cache}` for a forward or generate call: transformers 5.20+ takes `cache=`,
    earlier 5.x `past_key_values=` (the vLLM environment pins one of those)."""
    kind = type(model)
    if kind not in _CACHE_KWARG:
        parameters = inspect.signature(model.forward).parameters
        _CACHE_KWARG[kind] = "cache" if "cache" in parameters else "past_key_values"
    return {_CACHE_KWARG[kind]: cache}


def truncate(cache: Any, length: int) -> None:
    """Keep the first `length` positions of every layer of a DynamicCache."""
    for layer in cache.layers:
        if getattr(layer, "is_initialized", True) and layer.keys is not None:
            layer.keys = layer.keys[:, :, :length]
            layer.values = layer.values[:, :, :length]


def quiet_transformers() -> None:
    """transformers prints its own progress bars and advice; our CLI owns stderr."""
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def context_length(config: Any) -> int:
    """The model's context window in tokens, from the usual config fields."""
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    raise ModelLoadError("the model config names no context length (max_position_embeddings)")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
