"""prune: drop the tokens a small LM finds predictable and nothing attends to; keep meaning.

Methods (all rank-based, so scores of different scales combine):
    entropy    self-information −log p(x_t | x_<t): keep what the model could not predict
    attention  attention mass the token receives from later tokens (position-corrected)
    hybrid     0.35 × rank(self-information) + 0.25 × rank(attention × (1 − normalised
               predictive entropy), the seed's importance formula) + 0.4 × relative position
               (text nearest the point of generation matters most to the continuation)
    ewma       hybrid divided by its EWMA-smoothed running level (α = 0.95): keep tokens that
               stand out from their neighbourhood; without a rate, keep those above 1.2× it
Protected tokens are never removed: numbers, negations, `--protect` patterns; in prose, names,
identifiers, code spans and URLs stay whole; in code only comment and string contents are
removable token by token, then whole lines when that is not enough, and the output must still
parse (each line removal is checked with the tree-sitter parser).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from copilot_cli.core.errors import InputError
from copilot_cli.core.syntax import parser_for, parses
from copilot_cli.core.tokens import count_tokens, encode_with_offsets, leading_special_ids
from copilot_cli.prune.protect import (
    NEGATIONS,
    NEWLINES,
    NUMBERS,
    PROSE_NAMES,
    code_removable_spans,
    compile_patterns,
    contained,
    looks_like_code,
    mark,
    spans_of,
)
from copilot_cli.prune.scoring import TokenScores, score_tokens

METHODS = ("entropy", "attention", "hybrid", "ewma")


@dataclass(frozen=True)
class PruneOptions:
    """Settings of prune: exactly one of `rate` (share of tokens kept) and `target_tokens`."""

    rate: float | None = None
    target_tokens: int | None = None
    method: str = "hybrid"
    protect: tuple[str, ...] = ()
    language: str | None = None  # "python", "text", or None to detect
    window: int = 512
    overlap: int = 128

    def __post_init__(self) -> None:
        if (self.rate is None) == (self.target_tokens is None) and not (
            self.rate is None and self.target_tokens is None and self.method == "ewma"
        ):
            raise InputError("give --rate or --target-tokens (one of them)", where="--rate")
        if self.rate is not None and not 0 < self.rate <= 1:
            raise InputError(f"{self.rate} is outside (0, 1]", where="--rate")
        if self.target_tokens is not None and self.target_tokens < 1:
            raise InputError("must be at least 1", where="--target-tokens")
        if self.method not in METHODS:
            raise InputError(
                f"unknown method {self.method!r}; choose {', '.join(METHODS)}", where="--method"
            )
        compile_patterns(self.protect)


@dataclass
class PruneResult:
    text: str
    original_tokens: int
    kept_tokens: int
    requested_rate: float | None
    achieved_rate: float
    method: str
    mode: str  # "prose" | "code" | "code-lines"
    kept_spans: list[tuple[int, int]] = field(default_factory=list)
    removed_spans: list[tuple[int, int]] = field(default_factory=list)
    parses: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ranks(values: torch.Tensor) -> torch.Tensor:
    order = torch.argsort(torch.argsort(values, stable=True), stable=True).double()
    return order / max(len(values) - 1, 1)


def importance(scores: TokenScores, method: str) -> torch.Tensor:
    surprisal = _ranks(scores.surprisal)
    attention = _ranks(scores.attention * (1 - scores.entropy))
    if method == "entropy":
        return surprisal
    if method == "attention":
        return _ranks(scores.attention)
    recency = torch.arange(len(surprisal), dtype=torch.float64) / max(len(surprisal) - 1, 1)
    hybrid = 0.35 * surprisal + 0.25 * attention + 0.4 * recency
    if method == "hybrid":
        return hybrid
    level = torch.empty_like(hybrid)
    running = float(hybrid[0]) if len(hybrid) else 0.0
    for index, value in enumerate(hybrid.tolist()):
        running = 0.95 * running + 0.05 * value
        level[index] = running
    return hybrid / level.clamp_min(1e-6)


def _assemble(
    text: str, offsets: list[tuple[int, int]], keep: list[bool]
) -> tuple[str, list[tuple[int, int]], list[tuple[int, int]]]:
    """Output text from kept tokens; spans merged (kept and removed, character offsets)."""
    pieces, kept, removed = [], [], []
    previous = 0
    for (start, end), flag in zip(offsets, keep, strict=True):
        start = max(start, previous)
        target = kept if flag else removed
        if target and target[-1][1] == start:
            target[-1] = (target[-1][0], end)
        elif end > start:
            target.append((start, end))
        if flag:
            pieces.append(text[start:end])
        previous = max(previous, end)
    return "".join(pieces), kept, removed


def word_units(text: str, offsets: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Token index ranges of words: pruning removes whole words (with their leading space) and
    punctuation marks, never a piece of a word, so what remains is readable."""
    units: list[tuple[int, int]] = []
    previous = ""
    for index, (start, end) in enumerate(offsets):
        piece = text[start:end]
        spacing = bool(previous) and not previous.strip(" \t")  # a bare space before a word
        if not units or (piece and piece[0].isspace()):
            new = True
        elif spacing:
            new = False
        else:
            new = not piece or not piece[0].isalnum() or not previous[-1:].isalnum()
        if new:
            units.append((index, index + 1))
        else:
            units[-1] = (units[-1][0], index + 1)
        previous = piece
    return units


def _select(
    score: torch.Tensor, protected: list[bool], keep_count: int, units: list[tuple[int, int]]
) -> list[bool]:
    """Keep protected tokens, then the best-scoring whole units until `keep_count` tokens."""
    keep = list(protected)
    kept = sum(keep)
    candidates = []
    for start, end in units:
        if any(protected[start:end]):
            for index in range(start, end):
                if not keep[index]:
                    keep[index] = True
                    kept += 1
            continue
        candidates.append((-float(score[start:end].mean()), start, end))
    for _, start, end in sorted(candidates):
        if kept >= keep_count:
            break
        for index in range(start, end):
            keep[index] = True
        kept += end - start
    return keep


def prune(
    text: str,
    model: Any,
    tokenizer: Any,
    *,
    rate: float | None = None,
    target_tokens: int | None = None,
    method: str = "hybrid",
    protect: tuple[str, ...] = (),
    language: str | None = None,
    window: int = 512,
    overlap: int = 128,
) -> PruneResult:
    """Compress `text` to about `rate` of its tokens (or `target_tokens`) with the given method.

    Deterministic; memory is bounded by the scoring window. For code (Python today), the
    result parses whenever the input did.
    """
    options = PruneOptions(
        rate=rate,
        target_tokens=target_tokens,
        method=method,
        protect=protect,
        language=language,
        window=window,
        overlap=overlap,
    )
    if not text.strip():
        raise InputError("nothing to prune (empty input)", where="INPUT")
    ids, offsets = encode_with_offsets(tokenizer, text)
    n = len(ids)
    lead = leading_special_ids(tokenizer)
    scores = score_tokens(model, lead + ids, window=window, overlap=overlap)
    scores = TokenScores(
        scores.surprisal[len(lead) :], scores.entropy[len(lead) :], scores.attention[len(lead) :]
    )
    score = importance(scores, method)
    if target_tokens is not None:
        goal = min(target_tokens, n)
    elif rate is not None:
        goal = max(1, round(rate * n))
    else:  # ewma without a rate: keep what stands out by the seed's 1.2 margin
        goal = max(1, int((score > 1.2).sum()))
    code_language = (
        language
        if language not in (None, "text")
        else (None if language == "text" else looks_like_code(text))
    )
    patterns = [NUMBERS, NEGATIONS, *compile_patterns(options.protect)]
    protected_spans = spans_of(text, patterns)
    if code_language is None:
        protected_spans += spans_of(text, [PROSE_NAMES, NEWLINES])
        protected = mark(offsets, protected_spans)
        mode = "prose"
    else:
        removable = code_removable_spans(text, code_language) or []
        in_removable = contained(offsets, removable)
        # complete code (or code cut right after a block opener) must stay complete
        strict = parses(
            text + (_completion(text) if code_language == "python" else ""), code_language
        )
        hard = mark(offsets, protected_spans)
        protected = [not r or h for r, h in zip(in_removable, hard, strict=True)]
        mode = "code"
    units = word_units(text, offsets)
    keep_count = goal
    best = None
    for _ in range(4):  # re-tokenised output length drifts from the token count: correct it
        keep = _select(score, protected, keep_count, units)
        output, kept, removed = _assemble(text, offsets, keep)
        achieved = count_tokens(tokenizer, output)
        best = (output, kept, removed, achieved)
        if abs(achieved - goal) <= max(1, 0.02 * goal):
            break
        keep_count = max(1, keep_count + (goal - achieved))
    output, kept, removed, achieved = best
    if code_language is not None and achieved > goal * 1.05:
        output, kept, removed = _prune_lines(
            output, score, offsets, keep, code_language, goal, tokenizer, strict
        )
        achieved = count_tokens(tokenizer, output)
        mode = "code-lines"
    return PruneResult(
        text=output,
        original_tokens=n,
        kept_tokens=achieved,
        requested_rate=rate if rate is not None else (goal / n if n else None),
        achieved_rate=achieved / n if n else 1.0,
        method=method,
        mode=mode,
        kept_spans=kept,
        removed_spans=removed,
        parses=_valid(output, code_language, strict) if code_language else None,
    )


def _completion(text: str) -> str:
    """A `pass` line that closes a trailing block opener (prompts often end with "...:")."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[-1].rstrip().endswith(":"):
        return ""
    indent = len(lines[-1]) - len(lines[-1].lstrip())
    return ("" if text.endswith("\n") else "\n") + " " * (indent + 4) + "pass\n"


def _valid(text: str, language: str, strict: bool) -> bool:
    """Complete code (or a prompt cut right after a block opener) must pass the interpreter's
    parser too; any other fragment only the tree-sitter grammar."""
    if strict:
        return parses(text + (_completion(text) if language == "python" else ""), language)
    parser = parser_for(language)
    return parser is None or not parser.parse(text.encode("utf-8")).root_node.has_error


def _prune_lines(
    output: str,
    score: torch.Tensor,
    offsets: list[tuple[int, int]],
    keep: list[bool],
    language: str,
    goal: int,
    tokenizer: Any,
    strict: bool,
) -> tuple[str, list[tuple[int, int]], list[tuple[int, int]]]:
    """Coarser pruning for code: drop whole lines, least important first, while it parses."""
    line_values: list[list[float]] = [[]]
    kept_scores = [v for v, flag in zip(score.tolist(), keep, strict=True) if flag]
    position = 0
    kept_offsets = [o for o, flag in zip(offsets, keep, strict=True) if flag]
    for (start, end), value in zip(kept_offsets, kept_scores, strict=True):
        length = end - start
        piece = output[position : position + length]
        line_values[-1].append(value)
        for _ in range(piece.count("\n")):
            line_values.append([])
        position += length
    lines = output.splitlines(keepends=True)
    means = [sum(v) / len(v) if v else 0.0 for v in line_values][: len(lines)]
    means += [0.0] * (len(lines) - len(means))
    alive = [True] * len(lines)
    total = count_tokens(tokenizer, output)
    order = sorted(range(len(lines)), key=lambda i: (means[i], i))
    # Several passes: a block opener can only go once its body has gone. The first passes
    # refuse a removal that would undershoot the goal by more than 3%; the last one does not.
    for careful in (True, True, True, False):
        progress = False
        for index in order:
            if total <= goal:
                break
            if not alive[index] or not lines[index].strip():
                continue
            alive[index] = False
            candidate = "".join(line for line, a in zip(lines, alive, strict=True) if a)
            count = (
                count_tokens(tokenizer, candidate) if _valid(candidate, language, strict) else None
            )
            if count is None or (careful and count < goal * 0.97):
                alive[index] = True
                continue
            total, progress = count, True
        if total <= goal or (not progress and not careful):
            break
    result = "".join(line for line, a in zip(lines, alive, strict=True) if a)
    kept_spans, removed_spans, position = [], [], 0
    for line, a in zip(lines, alive, strict=True):
        (kept_spans if a else removed_spans).append((position, position + len(line)))
        position += len(line)
    return result, kept_spans, removed_spans
