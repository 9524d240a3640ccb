"""Variant specs (`--variant NAME=KIND=ARG[+KIND=ARG...]`) and how each changes a forward pass.

Kinds:
    quant=DIR          quantize's output applied to the model's embeddings (and head)
    kv=DIR             prefill-kv's caches: the prefix comes from the stored KV
    kv-dtype=DTYPE     the prompt's own KV cache stored as float16, bfloat16 or int8 (per token
                       and head, absmax scales) and read back before continuing
    prune=OPTIONS      the first half of each prompt compressed by prune (OPTIONS: a rate such
                       as 0.5, or rate:0.5,method:ewma), the second half scored

With `--engine vllm` each variant runs in vLLM and its kinds are:
    vllm=OPTIONS       the engine and its options: `default`, or KEY:VALUE,... with keys
                       kv-cache-dtype, dtype, quantization, model (another checkpoint of the
                       model, e.g. a quantized one) and logprobs (`full`, or a count k: the
                       engine's own top-k plus the target, KL over them plus a lumped rest)
    kv=DIR             the connector serving a prefill-kv folder (the prefix comes from it)

With `--engine llama.cpp` (regress/llamacpp_engine.py):
    llamacpp=FILE      the GGUF that computes the variant (a quantize --export, ...)
    kv=DIR             a slot folder of prefill-kv --engine llama.cpp (the prefix restored)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from copilot_cli import quant
from copilot_cli.core import lazy
from copilot_cli.core.errors import InputError
from copilot_cli.core.options import OptionError
from copilot_cli.prune import METHODS, PruneOptions

torch = lazy.module("torch")

if TYPE_CHECKING:  # parsing a variant (build's config check) never needs torch
    import torch

KINDS = ("quant", "kv", "kv-dtype", "prune")
ENGINE_KINDS = {
    "transformers": KINDS,
    "vllm": ("vllm", "kv"),
    "llama.cpp": ("llamacpp", "kv"),
}
ENGINE_KEYS = ("kv-cache-dtype", "dtype", "quantization", "model", "logprobs")
KV_DTYPES = ("float16", "bfloat16", "int8")


@dataclass(frozen=True)
class Component:
    kind: str
    arg: str


@dataclass(frozen=True)
class VariantSpec:
    """A named combination of components, e.g. `q8kv=quant=build/quant+kv=build/kv`."""

    name: str
    components: tuple[Component, ...] = field(default_factory=tuple)

    def kind(self, kind: str) -> Component | None:
        return next((c for c in self.components if c.kind == kind), None)

    @property
    def case_set(self) -> str:
        """Which token sequences this variant is scored on."""
        kv = self.kind("kv")
        if kv is not None:
            return f"kv:{kv.arg}"
        if self.kind("kv-dtype") is not None or self.kind("prune") is not None:
            return "split"
        return "prompts"

    @property
    def spec(self) -> str:
        return "+".join(f"{c.kind}={c.arg}" for c in self.components)


def parse_variant(
    text: str, kinds: tuple[str, ...] = KINDS, *, check_paths: bool = True
) -> VariantSpec:
    """Parse `NAME=KIND=ARG+KIND=ARG` or `KIND=ARG+...` (the name is then the spec itself);
    with `check_paths`, the quant/kv artifacts must exist."""
    head, sep, rest = text.partition("=")
    if not sep:
        raise OptionError("variants", f"{text!r} is not NAME=KIND=ARG (kinds: {', '.join(kinds)})")
    if head in kinds and rest.partition("=")[0] in kinds and "=" in rest:
        raise OptionError(
            "variants",
            f"a variant cannot be named {head!r}, the name of a kind: name it otherwise "
            f"(e.g. my-{head}={rest})",
        )
    if head in kinds:
        name, spec = text, text
    else:
        name, spec = head, rest
    components = []
    for piece in _split_components(spec, kinds):
        kind, sep, arg = piece.partition("=")
        if kind not in kinds:
            raise OptionError(
                "variants", f"unknown variant kind {kind!r}; kinds: {', '.join(kinds)}"
            )
        if not sep or not arg:
            raise OptionError("variants", f"{kind} needs a value ({kind}=...)")
        if kind == "kv-dtype" and arg not in KV_DTYPES:
            raise OptionError("variants", f"kv-dtype must be one of {', '.join(KV_DTYPES)}")
        if kind == "prune":
            prune_options(arg)
        if kind == "vllm":
            engine_options(arg)
        if check_paths and kind in ("quant", "kv", "llamacpp") and not Path(arg).exists():
            raise InputError(f"{kind} artifact does not exist", where=arg)
        if check_paths and kind == "llamacpp" and not arg.lower().endswith(".gguf"):
            raise InputError("llamacpp takes a GGUF file (FILE.gguf)", where=arg)
        components.append(Component(kind, arg))
    seen = [c.kind for c in components]
    if len(set(seen)) != len(seen):
        raise OptionError("variants", f"a kind appears twice in {text!r}")
    if "prune" in seen and ("kv" in seen or "kv-dtype" in seen):
        raise OptionError("variants", "prune cannot be combined with kv or kv-dtype")
    if "kv" in seen and "kv-dtype" in seen:
        raise OptionError("variants", "kv and kv-dtype cannot be combined")
    if not name:
        raise OptionError("variants", "empty variant name")
    return VariantSpec(name=name, components=tuple(components))


def _split_components(spec: str, kinds: tuple[str, ...]) -> list[str]:
    """Split on '+' only where a known kind follows, so paths may contain '+'."""
    pieces: list[str] = []
    current = ""
    for part in spec.split("+"):
        if current and any(part.startswith(f"{k}=") for k in kinds):
            pieces.append(current)
            current = part
        else:
            current = f"{current}+{part}" if current else part
    pieces.append(current)
    return pieces


def degrade_cache(cache: Any, dtype: str) -> None:
    """Store-and-reload every layer's keys/values at `dtype` (int8: per token and head)."""
    for layer in cache.layers:
        layer.keys = _roundtrip(layer.keys, dtype)
        layer.values = _roundtrip(layer.values, dtype)


def _roundtrip(tensor: torch.Tensor, dtype: str) -> torch.Tensor:
    if dtype in ("float16", "bfloat16"):
        return tensor.to(getattr(torch, dtype)).to(tensor.dtype)
    scale = tensor.abs().amax(dim=-1, keepdim=True) / 127.0  # one scale per token and head
    safe = torch.where(scale == 0, torch.ones_like(scale), scale)
    q = torch.round(tensor / safe).clamp(-127, 127)
    return (q * scale).to(tensor.dtype)


@contextlib.contextmanager
def applied(
    spec: VariantSpec, model: Any, tokenizer: Any, loaded: dict[str, Any] | None = None
) -> Iterator[None]:
    """Temporarily change `model` the way `spec`'s model-side components say (quant).

    `loaded` memoises the quantized modules by artifact path, so a run reads and verifies each
    artifact once rather than once per prompt.
    """
    component = spec.kind("quant")
    if component is None:
        yield
        return
    cache = loaded if loaded is not None else {}
    if component.arg not in cache:
        cache[component.arg] = quant.load_quantized(model, component.arg, tokenizer=tokenizer)
    with quant.swapped_embeddings(model, *cache[component.arg]):
        yield


def prune_options(arg: str, text: str = "") -> Any:
    """`0.5` or `rate:0.5,method:ewma` -> PruneOptions for `text`."""

    values: dict[str, Any] = {}
    for item in arg.split(","):
        key, sep, value = item.partition(":")
        if not sep:
            key, value = "rate", key
        try:
            if key == "rate":
                values["rate"] = float(value)
            elif key == "method" and value in METHODS:
                values["method"] = value
            else:
                raise ValueError
        except ValueError:
            raise OptionError(
                "variants",
                f"prune options {arg!r}: use a rate in (0, 1] and method:{'|'.join(METHODS)}",
            ) from None
    values.setdefault("rate", 0.5)
    try:
        return PruneOptions(text=text, **values)
    except OptionError as exc:
        raise OptionError("variants", f"prune options {arg!r}: {exc.message}") from None


def engine_options(arg: str) -> dict[str, str]:
    """`default` or `kv-cache-dtype:fp8,logprobs:32` -> {key: value} (keys: ENGINE_KEYS)."""
    if arg == "default":
        return {}
    values: dict[str, str] = {}
    for item in arg.split(","):
        key, sep, value = item.partition(":")
        if key not in ENGINE_KEYS or not sep or not value or key in values:
            raise OptionError(
                "variants",
                f"vllm options {arg!r}: use default or KEY:VALUE,... with keys "
                f"{', '.join(ENGINE_KEYS)} (each once)",
            )
        values[key] = value
    logprobs = values.get("logprobs", "full")
    if logprobs != "full" and not (logprobs.isdigit() and 1 <= int(logprobs) <= 4096):
        raise OptionError("variants", f"vllm logprobs {logprobs!r}: use full or a count 1-4096")
    if "model" in values and not Path(values["model"]).is_dir():
        raise InputError("vllm model folder does not exist", where=values["model"])
    return values
