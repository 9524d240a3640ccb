"""prune --method search: spread patterns, chosen part by part on the model's own continuation.

`spread` removes evenly, in the order of the golden-ratio sequence; each phase of that sequence
gives another pattern, as even and as valid (rate, parsing). Which pattern keeps the model's
predictions closest differs from text to text, and it can be measured without anything but the
text: the model writes its own greedy continuation of the full text (the probe), and a
compressed text is judged by the mean KL divergence of the model's predictions on that
continuation after it, against after the full text (the measure regress gates on).

search prunes with `PATTERNS` phases, keeps the pattern the probe likes best, then splits the
text at line starts into `SEGMENTS` parts and, from the last part to the first, swaps in
another pattern's removals for that part when the result still meets the rate (`OVER`/`UNDER`),
still parses (code) and moves the probe's predictions less. Deterministic: greedy decoding,
fixed phases, ties to the earlier pattern.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any

import torch

from copilot_cli.core import lazy
from copilot_cli.core.models import LoadedModel, cache_kwargs, context_length, truncate
from copilot_cli.core.tokens import count_tokens, leading_special_ids, prompt_ids
from copilot_cli.prune.code import Frame
from copilot_cli.prune.removal import Attempt, Removed, spans

transformers = lazy.module("transformers")

PATTERNS = 8  # phases k/8 of the golden-ratio sequence
SEGMENTS = 8  # parts of the text whose pattern is chosen one by one
PROBE_TOKENS = 64  # length of the model's own continuation the choice is judged on
# a mix may keep up to 2% more tokens than the goal (as much as a single pattern may: keeping
# more would win on the probe for the wrong reason) and up to 4% fewer (the rate stays within
# 5% with the goal's rounding)
OVER, UNDER = 0.02, 0.04


class Probe:
    """The model's greedy continuation of a text, and its predictions along it."""

    def __init__(self, loaded: LoadedModel, text: str, tokens: int = PROBE_TOKENS) -> None:
        self.model, self.tokenizer = loaded.model, loaded.tokenizer
        self.device = next(self.model.parameters()).device
        self.lead = leading_special_ids(self.tokenizer)
        self.room = max(len(self.lead) + 1, context_length(self.model.config) - tokens)
        ids = self._window(prompt_ids(self.tokenizer, text))
        self.continuation = self._greedy(ids, tokens)
        self.prefix = _Prefix(self.model, self.device)
        self.target = self._log_probs(ids)

    def _window(self, ids: list[int]) -> list[int]:
        """The ids with the continuation still inside the model's context (the lead kept)."""
        if len(ids) <= self.room:
            return ids
        return self.lead + ids[len(ids) - (self.room - len(self.lead)) :]

    @torch.no_grad()
    def _greedy(self, ids: list[int], tokens: int) -> list[int]:
        cache = transformers.DynamicCache(config=self.model.config)
        step = torch.tensor([ids], device=self.device)
        out: list[int] = []
        for _ in range(tokens):
            logits = self.model(
                input_ids=step, use_cache=True, logits_to_keep=1, **cache_kwargs(self.model, cache)
            ).logits[0, -1]
            out.append(int(logits.argmax()))
            step = torch.tensor([[out[-1]]], device=self.device)
        return out

    def _log_probs(self, ids: list[int]) -> torch.Tensor:
        keep = len(self.continuation)
        logits = self.prefix.logits(ids + self.continuation, keep + 1)[:keep]
        return torch.log_softmax(logits.float(), dim=-1)

    def divergence(self, text: str) -> float:
        """Mean KL(full ‖ after `text`) of the next-token predictions along the continuation."""
        log_q = self._log_probs(self._window(prompt_ids(self.tokenizer, text)))
        return float((self.target.exp() * (self.target - log_q)).sum(-1).mean())


class _Prefix:
    """The keys and values of the last sequence fed, reused for the first tokens the next one
    shares with it (the texts search compares differ from one part on): only the rest is run.
    Plain dynamic caches only; other cache layers (sliding windows, ...) run every sequence
    whole."""

    def __init__(self, model: Any, device: Any) -> None:
        self.model, self.device = model, device
        self.ids: list[int] = []
        self.cache: Any = None

    @torch.no_grad()
    def logits(self, ids: list[int], keep: int) -> torch.Tensor:
        """The logits of the last `keep` positions of `ids`."""
        shared = 0
        if self.cache is not None:
            limit = min(len(self.ids), len(ids) - keep)
            while shared < limit and self.ids[shared] == ids[shared]:
                shared += 1
            truncate(self.cache, shared)
        else:
            self.cache = transformers.DynamicCache(config=self.model.config)
        x = torch.tensor([ids[shared:]], device=self.device)
        out = self.model(
            input_ids=x, use_cache=True, logits_to_keep=keep, **cache_kwargs(self.model, self.cache)
        )
        plain = all(type(layer).__name__ == "DynamicLayer" for layer in self.cache.layers)
        self.ids, self.cache = (ids, self.cache) if plain else ([], None)
        return out.logits[0]


def search(
    text: str,
    attempt: Callable[..., Attempt],
    loaded: LoadedModel,
    goal: int,
    fr: Frame | None,
) -> Attempt:
    """The best mix of `attempt(phase)` patterns for `text` (see the module docstring);
    `attempt` returns the pruner's Attempt (text, kept/removed spans, tokens, lines, parses),
    and for code `attempt(phase, spans)` tops up removed spans to the goal."""
    bounds = _bounds(text, fr.cut if fr is not None else len(text))
    patterns = [attempt(k / PATTERNS) for k in range(PATTERNS)]
    probe = Probe(loaded, text)
    values = [probe.divergence(p.text) for p in patterns]
    first = min(range(PATTERNS), key=lambda k: (values[k], k))
    best, best_value = patterns[first], values[first]
    choice = [first] * (len(bounds) - 1)
    mix = _Mixer(text, patterns, bounds, fr, loaded.tokenizer, goal, attempt)
    for segment in reversed(range(len(choice))):
        for k in range(PATTERNS):
            trial = [*choice[:segment], k, *choice[segment + 1 :]]
            mixed = mix(trial, k) if mix.differs(choice, segment, k) else None
            if mixed is None:
                continue
            value = probe.divergence(mixed.text)
            if value < best_value:
                best, best_value, choice = mixed, value, trial
    return best


def _bounds(text: str, cut: int) -> list[int]:
    """Up to SEGMENTS parts of text[:cut] split at line starts; the last part runs to the end."""
    bounds = [0]
    for part in range(1, SEGMENTS):
        start = text.rfind("\n", 0, cut * part // SEGMENTS) + 1
        if start > bounds[-1]:
            bounds.append(start)
    bounds.append(len(text))
    return bounds


class _Mixer:
    """Texts made of one pattern's removals per part, kept only when they meet the rate and
    (code) still parse."""

    def __init__(
        self,
        text: str,
        patterns: list[Attempt],
        bounds: list[int],
        fr: Frame | None,
        tokenizer: Any,
        goal: int,
        attempt: Callable[..., Attempt],
    ) -> None:
        self.text, self.patterns, self.bounds = text, patterns, bounds
        self.fr, self.tokenizer, self.goal, self.attempt = fr, tokenizer, goal, attempt
        self.parts = [
            [_within(p.removed_spans, bounds[s], bounds[s + 1]) for s in range(len(bounds) - 1)]
            for p in patterns
        ]

    def differs(self, choice: list[int], segment: int, k: int) -> bool:
        return self.parts[k][segment] != self.parts[choice[segment]][segment]

    def __call__(self, choice: list[int], k: int) -> Attempt | None:
        """The mix `choice` (pattern per part); code over the goal is topped up in the order
        of pattern `k`."""
        removed = Removed()
        for part, j in enumerate(choice):
            for start, end in self.parts[j][part]:
                removed.add(start, end)
        output = removed.apply(self.text, 0, len(self.text))
        tokens = count_tokens(self.tokenizer, output)
        if tokens - self.goal > max(2, OVER * self.goal) and self.fr is not None:
            taken = list(zip(removed.starts, removed.ends, strict=True))
            return self._fits(self.attempt(k / PATTERNS, taken))
        parses = None
        if self.fr is not None and self._rate_ok(tokens):
            parses = self.fr.valid(output[: len(output) - (len(self.text) - self.fr.cut)])
        kept, removed_spans = spans(removed, len(self.text))
        # whole statements went in one of the patterns used (perhaps not in the parts taken)
        lines = any(self.patterns[j].lines for j in set(choice))
        return self._fits(Attempt(output, kept, removed_spans, tokens, lines, parses))

    def _rate_ok(self, tokens: int) -> bool:
        return -max(2, UNDER * self.goal) <= tokens - self.goal <= max(2, OVER * self.goal)

    def _fits(self, mixed: Attempt) -> Attempt | None:
        """The mix, when it meets the rate and (code) parses as the patterns do."""
        if not self._rate_ok(mixed.tokens):
            return None
        if self.fr is not None and not mixed.parses and all(p.parses for p in self.patterns):
            return None  # a mix must parse when every pattern does
        return mixed


def _within(spans: list[tuple[int, int]], lo: int, hi: int) -> tuple[tuple[int, int], ...]:
    """The spans that start in [lo, hi)."""
    starts = [start for start, _ in spans]
    return tuple(spans[bisect.bisect_left(starts, lo) : bisect.bisect_left(starts, hi)])
