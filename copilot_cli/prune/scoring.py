"""Per-token signals from a small causal LM, in overlapping windows (bounded memory).

For token t:  surprisal  = −log p(x_t | x_<t)            (self-information, nats)
              entropy    = H(p(· | x_<t)) / log |V|        (normalised predictive entropy)
              attention  = mean over later queries i ≥ t of a[i, t] · (i + 1), averaged over
                           heads and layers: the attention the token receives, corrected for the
                           1/(i+1) share a causal query spreads over its keys (1.0 = average).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class TokenScores:
    surprisal: torch.Tensor  # float64 [n]
    entropy: torch.Tensor  # float64 [n]
    attention: torch.Tensor  # float64 [n]


@contextlib.contextmanager
def eager_attention(model: Any) -> Iterator[None]:
    """Attention weights need the eager implementation (sdpa does not return them)."""
    previous = getattr(model.config, "_attn_implementation", None)
    if previous in (None, "eager"):
        yield
        return
    model.set_attn_implementation("eager")
    try:
        yield
    finally:
        model.set_attn_implementation(previous)


@torch.no_grad()
def score_tokens(
    model: Any, ids: list[int], *, window: int = 512, overlap: int = 128
) -> TokenScores:
    """Score every token of `ids`; windows of `window` tokens overlap by `overlap` so each
    scored token (past the first window) has at least `overlap` tokens of context."""
    n = len(ids)
    surprisal = torch.zeros(n, dtype=torch.float64)
    entropy = torch.zeros(n, dtype=torch.float64)
    attention = torch.zeros(n, dtype=torch.float64)
    if n == 0:
        return TokenScores(surprisal, entropy, attention)
    device = next(model.parameters()).device
    vocab_log = math.log(model.config.vocab_size)
    window = max(window, overlap + 2)
    start = 0
    with eager_attention(model):
        while True:
            end = min(start + window, n)
            chunk = torch.tensor([ids[start:end]], device=device)
            out = model(chunk, output_attentions=True)
            first = start if start == 0 else start + overlap
            positions = torch.arange(max(first, start + 1), end)
            local = positions - start
            # only the rows scored in this window, in float32 (the vocabulary axis is the
            # expensive one); sums go to float64 below
            log_p = torch.log_softmax(out.logits[0, local - 1].float(), dim=-1).cpu()
            targets = torch.tensor(ids, dtype=torch.long)[positions]
            rows = torch.arange(len(positions))
            surprisal[positions] = -log_p[rows, targets].double()
            entropy[positions] = -(log_p.exp() * log_p).sum(-1).double() / vocab_log
            stacked = sum(a[0].float().sum(0).cpu() for a in out.attentions).double()
            stacked /= len(out.attentions) * out.attentions[0].shape[1]
            length = end - start
            weights = stacked * torch.arange(1, length + 1, dtype=torch.float64).unsqueeze(1)
            received = weights.tril().sum(0) / torch.arange(length, 0, -1, dtype=torch.float64)
            span = torch.arange(first, end)
            attention[span] = received[span - start]
            if end == n:
                break
            start = end - overlap
    if n:
        surprisal[0] = surprisal[1:].max() if n > 1 else 0.0  # no context: never drop it first
        entropy[0] = 1.0
    return TokenScores(surprisal, entropy, attention)
