"""Moving stored keys to another position: RoPE re-rotation with the model's own frequencies.

A key cached at position s was rotated by s·θ_j per frequency pair (and scaled by the rope's
attention factor, which a move keeps). Rotations compose, so the same key at position p is
the cached key rotated once more by (p - s)·θ_j: no recompute, values untouched. The
frequencies are the model's rotary module's `inv_freq` (linear, llama3 and yarn scaling are
already folded in). Position encodings for which that is wrong are refused.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch

from copilot_cli.core.errors import InputError
from copilot_cli.kv.geometry import sliding_window

# RoPE kinds whose frequencies depend on the sequence length: a moved key would be wrong.
_LENGTH_DEPENDENT = ("dynamic", "longrope")
# layer kinds that carry a state instead of per-token keys (a snippet's state cannot be moved)
_STATEFUL = ("linear_attention", "mamba", "hybrid", "recurrent", "conv", "ssm")


@dataclass(frozen=True)
class Rotary:
    """The frequencies a model rotates its keys by: `inv_freq` (float64) over the first
    `2 * len(inv_freq)` dims of each head, in the rotate-half layout."""

    inv_freq: torch.Tensor

    @property
    def rotary_dims(self) -> int:
        return 2 * int(self.inv_freq.numel())


def rotary_of(model: Any, *, prompt_tokens: int | None = None) -> Rotary:
    """The model's rotary frequencies, or an InputError saying why its keys cannot move."""
    base = getattr(model, "model", model)
    rotary = getattr(base, "rotary_emb", None)
    config = model.config
    inv_freq = getattr(rotary, "inv_freq", None)
    if rotary is None or inv_freq is None:
        kind = getattr(config, "model_type", "this model")
        raise InputError(
            f"{kind} has no rotary position embedding (learned or ALiBi positions): its cached "
            "keys cannot be moved to another position",
            where="--model",
        )
    if stateful := _stateful_layers(config):
        raise InputError(
            f"its {stateful} layers carry a recurrent state, not per-token keys: a snippet's "
            "cached state cannot be moved to another place in a prompt",
            where="--model",
        )
    rope_type = str(getattr(rotary, "rope_type", "default"))
    if rope_type in _LENGTH_DEPENDENT:
        raise InputError(
            f"its RoPE ({rope_type}) changes with the sequence length: moved keys would be wrong",
            where="--model",
        )
    window = _window(config)
    if window and prompt_tokens is not None and prompt_tokens > window:
        raise InputError(
            f"a {prompt_tokens}-token prompt is longer than its sliding window ({window}): "
            "reused chunk keys would be attended where the model masks them",
            where="--model",
        )
    return Rotary(inv_freq.detach().to("cpu", torch.float64))


def _stateful_layers(config: Any) -> str | None:
    """The first recurrent or hybrid layer kind of a config (Jamba, Bamba, Qwen3-Next,
    Falcon-H1, RecurrentGemma...), or None."""
    for attribute in ("layer_types", "layers_block_type", "block_types"):
        for kind in getattr(config, attribute, None) or ():
            if any(word in str(kind).lower() for word in _STATEFUL):
                return str(kind)
    if any(name.startswith(("mamba_", "ssm_")) for name in vars(config)):
        return "mamba"
    return None


def _window(config: Any) -> int | None:

    return sliding_window(config)


def rerotate(keys: torch.Tensor, delta: int, rotary: Rotary) -> torch.Tensor:
    """`keys` ([..., seq, head_dim], any dtype) moved `delta` positions later (earlier when
    negative). The angle is computed in float64 and applied in float32, then cast back."""
    if delta == 0:
        return keys
    dims = rotary.rotary_dims
    angle = float(delta) * rotary.inv_freq
    cos = torch.cat((angle.cos(), angle.cos())).to(torch.float32)
    sin = torch.cat((angle.sin(), angle.sin())).to(torch.float32)
    k = keys.to(torch.float32)
    part, rest = k[..., :dims], k[..., dims:]
    half = dims // 2
    rotated = torch.cat((-part[..., half:], part[..., :half]), dim=-1)
    moved = part * cos.to(k.device) + rotated * sin.to(k.device)
    return torch.cat((moved, rest), dim=-1).to(keys.dtype) if rest.numel() else moved.to(keys.dtype)


def rotary_of_config(config: Any, *, prompt_tokens: int | None = None) -> Rotary:
    """The frequencies of a model known by its config alone (an engine holds the weights, as
    vLLM's connector does): its own rotary module built from the config, with the same checks
    as `rotary_of`."""

    kind = str(getattr(config, "model_type", ""))
    try:
        module = importlib.import_module(f"transformers.models.{kind}.modeling_{kind}")
    except ImportError:
        module = None
    found = [
        getattr(module, name)
        for name in dir(module or object)
        if name.endswith("RotaryEmbedding") and not name.startswith("_")
    ]
    if not found:
        raise InputError(
            f"{kind or 'this model'} has no rotary position embedding (learned or ALiBi "
            "positions): its cached keys cannot be moved to another position",
            where="--model",
        )

    holder = SimpleNamespace(config=config, rotary_emb=found[0](config))  # what rotary_of reads
    return rotary_of(holder, prompt_tokens=prompt_tokens)
