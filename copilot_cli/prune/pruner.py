"""prune: drop the tokens a small LM finds predictable and nothing attends to; keep meaning.

Methods (all rank-based, so scores of different scales combine):
    entropy    self-information −log p(x_t | x_<t): keep what the model could not predict
    attention  attention mass the token receives from later tokens (position-corrected)
    hybrid     0.35 × rank(self-information) + 0.25 × rank(attention × (1 − normalised
               predictive entropy), the seed's importance formula) + 0.4 × relative position
               (text nearest the point of generation matters most to the continuation).
               The default.
    ewma       hybrid divided by its EWMA-smoothed running level (α = 0.95): keep tokens that
               stand out from their neighbourhood (so removal spreads over the whole text);
               without a rate, keep those above 1.2× it.
    spread     no scores and no forward pass: the removal units, in text order, are taken in
               the order of the golden-ratio sequence (i·φ mod 1), so what goes is spread
               evenly over the whole text (a low-discrepancy stand-in for random dropping).
    search     spread's patterns at 8 phases of the sequence, mixed part by part: each part
               takes the pattern that moves the model's predictions least on the model's own
               greedy continuation of the full text (search.py). Measured best on long code
               contexts with the shipped model (docs/prune.md).
Protected tokens are never removed: numbers, negations, `--protect` patterns; in prose, names,
identifiers, code spans and URLs stay whole. Code (see code.py) loses only words inside
comments and strings, indentation where the language ignores it, runs of blank lines, and whole
line-owning statements (spread, search: also list elements within a line), each statement or
element removal checked by parsing; `--protect` text stays even then. The unfinished end of a
context cut out of a file is kept as it is.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from copilot_cli.core import progress
from copilot_cli.core.models import LoadedModel, load_model
from copilot_cli.core.options import OptionError
from copilot_cli.core.syntax import parses
from copilot_cli.core.tokens import count_tokens, encode_with_offsets, leading_special_ids
from copilot_cli.prune.code import Frame, code_units, detect, frame
from copilot_cli.prune.options import PruneOptions
from copilot_cli.prune.protect import (
    NEGATIONS,
    NEWLINES,
    NUMBERS,
    PROSE_NAMES,
    contained,
    mark,
    spans_of,
    user_spans,
)
from copilot_cli.prune.removal import Attempt, Removed, spans
from copilot_cli.prune.scoring import TokenScores, score_tokens
from copilot_cli.prune.search import search


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
    parses: bool | None = None  # code: whether the parsed part still parses
    language: str | None = None  # code language, None for prose
    verbatim_tail: int = 0  # characters at the end after the last line that parses, kept

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


GOLDEN = (5**0.5 - 1) / 2
PATTERN_METHODS = ("spread", "search")  # no scores: removal patterns from the sequence below


def spread_keys(count: int, phase: float = 0.0) -> list[float]:
    """Removal order for `count` units in text order: (phase + i·φ) mod 1 (lowest goes first).
    Any run of k consecutive units gets about its share of every prefix of the order (the
    golden-ratio sequence has the lowest discrepancy of the Kronecker sequences), so removal is
    even; another phase gives another pattern as even (method search tries several)."""
    return [(phase + index * GOLDEN) % 1.0 for index in range(count)]


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
    punctuation marks at word edges, never a piece of a word nor the mark inside one
    (`count-entry`, `a.b`), so what remains is readable and no two words are glued."""
    units: list[tuple[int, int]] = []
    previous = ""
    glued = False  # the previous token was a mark inside a word
    for index, (start, end) in enumerate(offsets):
        piece = text[start:end]
        spacing = bool(previous) and not previous.strip(" \t")  # a bare space before a word
        if not units or (piece and piece[0].isspace()):
            new = True
        elif spacing or glued:
            new = False
        elif piece[:1].isalnum():
            new = not previous[-1:].isalnum()
        else:
            following = text[end : end + 1] if index + 1 < len(offsets) else ""
            new = not (previous[-1:].isalnum() and following.isalnum() and piece.strip())
        glued = (
            bool(piece)
            and not piece[-1:].isalnum()
            and not piece[-1:].isspace()
            and (not new and previous[-1:].isalnum() and text[end : end + 1].isalnum())
        )
        if new:
            units.append((index, index + 1))
        else:
            units[-1] = (units[-1][0], index + 1)
        previous = piece
    return units


def _select(
    score: torch.Tensor | None,
    protected: list[bool],
    keep_count: int,
    units: list[tuple[int, int]],
    phase: float = 0.0,
) -> list[bool]:
    """Keep protected tokens, then the best-scoring whole units until `keep_count` tokens
    (no score: method spread, units kept in the reverse of their spread removal order)."""
    keep = list(protected)
    kept = sum(keep)
    candidates = []
    spread = spread_keys(len(units), phase) if score is None else []
    for number, (start, end) in enumerate(units):
        if any(protected[start:end]):
            for index in range(start, end):
                if not keep[index]:
                    keep[index] = True
                    kept += 1
            continue
        value = spread[number] if score is None else float(score[start:end].mean())
        candidates.append((-value, start, end))
    for _, start, end in sorted(candidates):
        if kept >= keep_count:
            break
        for index in range(start, end):
            keep[index] = True
        kept += end - start
    return keep


def prune_text(options: PruneOptions, loaded: LoadedModel | None = None) -> PruneResult:
    """Compress `options.text` to about `rate` of its tokens (or `target_tokens`, or what
    reaches `threshold`) with the given method. Loads `options.model` when no model is given.

    Deterministic; memory is bounded by the scoring window. For code (`language`, or detected
    when None), the part of the input that parses still parses.

    Raises:
        OptionError: empty text, or a setting out of range.
    """
    text = options.text
    if not text.strip():
        raise OptionError("text", "nothing to prune (empty input)")
    if loaded is None:
        with progress.progress("loading model"):
            loaded = load_model(options.model)
    tokenizer = loaded.tokenizer
    ids, offsets = encode_with_offsets(tokenizer, text)
    n = len(ids)
    score = (
        None
        if options.method in PATTERN_METHODS
        else _importance(loaded.model, tokenizer, ids, options)
    )
    goal = _goal(score, n, options)
    fr = _code_frame(text, options.language)
    attempt = _attempts(text, offsets, score, fr, goal, tokenizer, options.protect)
    if options.method == "search":
        result = search(text, attempt, loaded, goal, fr)
    else:
        result = attempt(0.0, None)
    mode = "prose" if fr is None else "code-lines" if result.lines else "code"
    return PruneResult(
        text=result.text,
        original_tokens=n,
        kept_tokens=result.tokens,
        requested_rate=options.rate if options.rate is not None else (goal / n if n else None),
        achieved_rate=result.tokens / n if n else 1.0,
        method=options.method,
        mode=mode,
        kept_spans=result.kept_spans,
        removed_spans=result.removed_spans,
        parses=result.parses,
        language=fr.language if fr is not None else None,
        verbatim_tail=len(text) - fr.cut if fr is not None else 0,
    )


def _attempts(
    text: str,
    offsets: list[tuple[int, int]],
    score: torch.Tensor | None,
    fr: Frame | None,
    goal: int,
    tokenizer: Any,
    protect: tuple[str, ...],
) -> Callable[..., Attempt]:
    """The pruning of `text` to `goal` tokens, as a function of the spread phase (which only
    methods spread and search use) and, for code, of character spans already removed (None:
    none): code through one parse-checking pruner, prose by words."""
    kept_by_user = user_spans(text, protect)
    protected_spans = spans_of(text, [NUMBERS, NEGATIONS]) + kept_by_user
    if fr is not None:
        pruner = _CodePruner(text, offsets, score, fr, goal, protected_spans, kept_by_user)
        return lambda phase, start=None: _prune_code(pruner.rekey(phase), tokenizer, start)
    protected = mark(offsets, protected_spans + spans_of(text, [PROSE_NAMES, NEWLINES]))
    return lambda phase, start=None: _prune_prose(
        text, offsets, score, protected, goal, tokenizer, phase
    )


def _importance(model: Any, tokenizer: Any, ids: list[int], options: PruneOptions) -> Any:
    """The method's importance of each token of `ids` (scored after the leading specials)."""
    lead = leading_special_ids(tokenizer)
    scores = score_tokens(model, lead + ids, window=options.window, overlap=options.overlap)
    scores = TokenScores(
        scores.surprisal[len(lead) :], scores.entropy[len(lead) :], scores.attention[len(lead) :]
    )
    return importance(scores, options.method)


def _goal(score: torch.Tensor | None, n: int, options: PruneOptions) -> int:
    """Tokens to keep: from the target, the rate, or the threshold (ewma: 1.2x its level)."""
    if options.target_tokens is not None:
        return min(options.target_tokens, n)
    if options.rate is not None:
        return max(1, round(options.rate * n))
    threshold = 1.2 if options.threshold is None else options.threshold
    assert score is not None  # spread needs a rate or a target (PruneOptions)
    return max(1, int((score >= threshold).sum()))


def _code_frame(text: str, language: str | None) -> Frame | None:
    if language is None:
        return detect(text)
    return None if language == "text" else frame(text, language)


def _prune_prose(
    text: str,
    offsets: list[tuple[int, int]],
    score: torch.Tensor | None,
    protected: list[bool],
    goal: int,
    tokenizer: Any,
    phase: float = 0.0,
) -> Attempt:
    units = word_units(text, offsets)
    keep_count = goal
    best = None
    for _ in range(4):  # re-tokenised output length drifts from the token count: correct it
        keep = _select(score, protected, keep_count, units, phase)
        output, kept, removed = _assemble(text, offsets, keep)
        achieved = count_tokens(tokenizer, output)
        best = Attempt(output, kept, removed, achieved, False, None)
        if abs(achieved - goal) <= max(1, 0.02 * goal):
            break
        keep_count = max(1, keep_count + (goal - achieved))
    return best


def _mean(values: list[float], first: int, last: int) -> float:
    return sum(values[first:last]) / (last - first)


WORD, BLANK, STATEMENT = 0, 1, 2  # removal units of code; only statements need a parse check


def _backslash_run(text: str, end: int) -> int:
    """How many backslashes stand right before `end`."""
    run = 0
    while end - run > 0 and text[end - run - 1] == "\\":
        run += 1
    return run


def _splits_escape(text: str, start: int, end: int) -> bool:
    """Whether removing text[start:end] would cut an escape sequence in two: the text starts
    right after an escaping backslash (`'\\r\\n'` losing `r\\n` keeps `'\\'`, which no
    longer closes) or ends with one (its character would be escaped no more)."""
    return _backslash_run(text, start) % 2 == 1 or _backslash_run(text, end) % 2 == 1


def _prune_code(
    pruner: _CodePruner, tokenizer: Any, start: list[tuple[int, int]] | None = None
) -> Attempt:
    """Remove the least important removable words (comments, string contents, indentation)
    and whole-line statements from the frame's head, each statement removal checked by
    parsing; the unfinished tail stays as it is."""
    text, fr, goal = pruner.text, pruner.fr, pruner.goal
    need = pruner.n - goal
    best = None
    local = True
    for _ in range(4):  # re-tokenised output length drifts from the estimate: correct it
        removed, lines = pruner.run(max(0, need), local, start)
        head = removed.apply(text, 0, fr.cut)
        valid = fr.valid(head)
        if local and not valid:
            local = False  # a local check let through what the whole does not take: recheck all
            removed, lines = pruner.run(max(0, need), local, start)
            head = removed.apply(text, 0, fr.cut)
            valid = fr.valid(head)
        output = head + text[fr.cut :]
        achieved = count_tokens(tokenizer, output)
        if best is None or abs(achieved - goal) < abs(best[0] - goal):
            best = (achieved, removed, output, lines, valid)
        if abs(achieved - goal) <= max(1, 0.02 * goal):
            break
        need += achieved - goal
    achieved, removed, output, lines, valid = best
    kept_spans, removed_spans = spans(removed, len(text))
    return Attempt(output, kept_spans, removed_spans, achieved, lines, valid)


class _CodePruner:
    """The removal candidates of one code frame and the parse-checked greedy removal."""

    def __init__(
        self,
        text: str,
        offsets: list[tuple[int, int]],
        score: torch.Tensor | None,
        fr: Frame,
        goal: int,
        protected_spans: list[tuple[int, int]],
        user_spans: list[tuple[int, int]],
    ) -> None:
        self.text, self.fr, self.goal, self.n = text, fr, goal, len(offsets)
        self.offsets = offsets
        self.token_starts = [start for start, _ in offsets]
        # spread also takes list elements: the finest units that keep the code parsing
        self.units = code_units(text, fr, elements_too=score is None)
        self.checked: dict[str, bool] = {}
        # (mean importance, start token, end token, start char, end char, kind)
        values = [0.0] * self.n if score is None else score.tolist()
        self.candidates = self._candidates(offsets, values, protected_spans, user_spans)
        self.spread = score is None
        if self.spread:  # the units in text order take the golden-ratio sequence (rekey)
            self.candidates.sort(key=lambda c: (c[3], c[4]))
        self.in_text_order = list(self.candidates)
        self.rekey(0.0)

    def rekey(self, phase: float) -> _CodePruner:
        """Order the candidates for removal (spread: by the sequence started at `phase`)."""
        if self.spread:
            keys = spread_keys(len(self.in_text_order), phase)
            self.candidates = [(k, *c[1:]) for k, c in zip(keys, self.in_text_order, strict=True)]
        self.candidates.sort()
        # the second pass of a run takes what the first left as too big, smallest first
        self.by_size = sorted(self.candidates, key=lambda c: (c[2] - c[1], c[0], c[1]))
        return self

    def _candidates(
        self,
        offsets: list[tuple[int, int]],
        values: list[float],
        protected_spans: list[tuple[int, int]],
        user_spans: list[tuple[int, int]],
    ) -> list[tuple[float, int, int, int, int, int]]:
        inside = contained(offsets, self.units.removable)
        hard = mark(offsets, protected_spans)
        token_starts = self.token_starts
        token_ends = [end for _, end in offsets]
        candidates = []
        for first, last in word_units(self.text, offsets):
            if token_ends[last - 1] <= self.fr.cut and all(
                inside[i] and not hard[i] for i in range(first, last)
            ):
                span = (offsets[first][0], offsets[last - 1][1])
                if _splits_escape(self.text, *span):
                    continue
                candidates.append((_mean(values, first, last), first, last, *span, WORD))
        user = sorted(user_spans)
        for start, end in self.units.statements + self.units.elements:
            first = bisect.bisect_left(token_starts, start)
            last = bisect.bisect_right(token_ends, end)
            if last <= first:
                continue
            k = bisect.bisect_left(user, (end,))
            if any(s < end and e > start for s, e in user[:k]):
                continue  # --protect text never goes, not even with its line
            candidates.append((_mean(values, first, last), first, last, start, end, STATEMENT))
        for start, end in self.units.blank_runs:
            first = bisect.bisect_right(token_ends, start)
            last = bisect.bisect_left(token_starts, end)
            if last > first and end > start:
                candidates.append((_mean(values, first, last), first, last, start, end, BLANK))
        return candidates

    def parses(self, candidate: str) -> bool:
        if candidate not in self.checked:  # the runs for successive budgets share first steps
            self.checked[candidate] = parses(candidate, self.fr.language)
        return self.checked[candidate]

    def allowed(self, removed: Removed, span: tuple[int, int], local: bool) -> bool:
        """Whether the head still parses without `span`: checked on the smallest segment
        holding it (or the one around, when the segment would be left empty)."""
        text = self.text
        chain = self.units.segments.innermost(*span) if local else [self.units.segments]
        for depth in range(len(chain) - 1, -1, -1):
            segment = chain[depth]
            body = removed.apply(text, segment.start, segment.end, span)
            if depth == 1 and not body.strip():
                return True  # a whole top-level definition goes: the others stay as they were
            if depth > 1 and not body.strip():
                continue  # an emptied member: its body must still parse (Python: not empty)
            around = [removed.apply(text, a, b, span) for a, b in segment.before]
            after = [removed.apply(text, a, b, span) for a, b in segment.after]
            return self.parses("".join(around) + body + segment.extra + "".join(after))
        return False

    def run(
        self, need: int, local: bool, start: list[tuple[int, int]] | None = None
    ) -> tuple[Removed, bool]:
        """Remove about `need` tokens; `start`: character spans already removed (their tokens
        count towards `need`), as when method search tops up a mix of patterns."""
        state = _Removal(self.n)
        for first, last in start or ():
            state.removed.add(first, last)
            k = bisect.bisect_left(self.token_starts, first)
            while k < self.n and self.offsets[k][1] <= last:
                if not state.gone[k]:
                    state.gone[k] = True
                    state.count += 1
                k += 1
        self._take(state, need, local)
        return state.removed, state.lines

    def _take(self, state: _Removal, need: int, local: bool) -> None:
        """Remove candidates (in removal order) until `state` has `need` tokens removed."""
        slack = max(2, round(0.02 * self.goal))
        gone = state.gone
        # the second pass takes what the first left as too big, smallest first: it must
        # overshoot the budget, by as little as it can
        for final, order in ((False, self.candidates), (True, self.by_size)):
            for _, first, last, start, end, kind in order:
                if state.count >= need:
                    return
                fresh = sum(1 for i in range(first, last) if not gone[i])
                if not fresh:
                    continue
                if kind == STATEMENT and not final and state.count + fresh > need + slack:
                    continue  # too big for what is left to remove: try smaller ones first
                if kind == STATEMENT and not self.allowed(state.removed, (start, end), local):
                    continue
                state.removed.add(start, end)
                for i in range(first, last):
                    gone[i] = True
                state.count += fresh
                state.lines |= kind == STATEMENT


class _Removal:
    """What a run has removed so far."""

    def __init__(self, n: int) -> None:
        self.removed = Removed()
        self.gone = [False] * n
        self.count = 0
        self.lines = False
