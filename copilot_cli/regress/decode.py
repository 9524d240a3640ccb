"""Greedy continuations for the gate, without `generate()`'s per-step machinery.

regress generates a fixed number of tokens (EOS suppressed, as `min_new_tokens` does) for the
base model and for every variant. For a model whose generation config adds no logits
processor, greedy decoding is: one forward over the uncached prompt tokens, then one token per
step, each time the arg-max of the last position's float32 logits with EOS masked out. This
loop does exactly that (same `logits_to_keep=1` forwards `generate()` makes, so the same
numbers) at about 15% less time per token on a small model. A model whose generation config
asks for anything more (a repetition penalty, banned words, beams...) goes through
`generate()` as before, so the gate always scores what the model's own generation would do.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from copilot_cli.core import lazy
from copilot_cli.core.models import cache_kwargs

transformers = lazy.module("transformers")

# generation-config fields that add logits processors to greedy decoding, with the values
# that leave logits alone
_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "repetition_penalty": (None, 1.0),
    "encoder_repetition_penalty": (None, 1.0),
    "no_repeat_ngram_size": (None, 0),
    "encoder_no_repeat_ngram_size": (None, 0),
    "bad_words_ids": (None,),
    "suppress_tokens": (None,),
    "begin_suppress_tokens": (None,),
    "forced_bos_token_id": (None,),
    "forced_eos_token_id": (None,),
    "forced_decoder_ids": (None,),
    "sequence_bias": (None,),
    "exponential_decay_length_penalty": (None,),
    "renormalize_logits": (None, False),
    "remove_invalid_values": (None, False),
    "guidance_scale": (None, 1.0),
    "watermarking_config": (None,),
    "num_beams": (None, 1),
    "num_beam_groups": (None, 1),
    "penalty_alpha": (None,),
    "dola_layers": (None,),
    "prompt_lookup_num_tokens": (None,),
    "token_healing": (None, False),
}


def plain_greedy(model: Any) -> bool:
    """True when greedy `generate()` on this model is plain arg-max (no processor but EOS
    suppression), so `greedy` gives the same tokens."""
    config = getattr(model, "generation_config", None)
    if config is None or "logits_to_keep" not in _forward_parameters(model):
        return False
    return all(getattr(config, name, None) in neutral for name, neutral in _NEUTRAL.items())


def _forward_parameters(model: Any) -> set[str]:

    return set(inspect.signature(model.forward).parameters)


def eos_ids(model: Any, tokenizer: Any) -> list[int]:
    """The ids `min_new_tokens` keeps from being generated (the generation config's EOS)."""
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    if eos is None:
        return []
    return [int(e) for e in (eos if isinstance(eos, list | tuple) else [eos])]


@torch.no_grad()
def greedy(
    model: Any, ids: torch.Tensor, n: int, eos: list[int], cache: Any | None = None
) -> list[int]:
    """`n` greedy tokens after `ids` (shape [1, T]); `cache` holds the first tokens' keys and
    values (it is extended in place) or is None."""
    if cache is None:
        cache = transformers.DynamicCache(config=model.config)
    kwargs = cache_kwargs(model, cache)
    step = ids[:, cache.get_seq_length() :]
    out: list[int] = []
    for _ in range(n):
        logits = model(step, logits_to_keep=1, **kwargs).logits[:, -1].to(dtype=torch.float32)
        if eos:
            logits[:, eos] = -float("inf")
        token = logits.argmax(-1)
        out.append(int(token[0]))
        step = token.view(1, 1)
    return out
