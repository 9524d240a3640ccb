"""Sequence similarity of greedy continuations: exact match, BLEU-4, normalized Levenshtein.

Both work on token ids of the target model's tokenizer (no re-tokenization, no language
rules), so the numbers are comparable across prompts and languages.
BLEU-4: geometric mean of modified 1..4-gram precisions with add-one smoothing for n > 1
(Lin & Och 2004, "smoothing 2"), times the brevity penalty exp(1 − r/c) when c < r.
"""

from __future__ import annotations

import math
from collections import Counter

from rapidfuzz.distance import Levenshtein


def _ngrams(tokens: list[int], n: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def bleu4(reference: list[int], hypothesis: list[int]) -> float:
    """Sentence BLEU-4 of `hypothesis` against one `reference`, in [0, 1]."""
    if not hypothesis or not reference:
        return 1.0 if hypothesis == reference else 0.0
    log_precision = 0.0
    for n in range(1, 5):
        hyp, ref = _ngrams(hypothesis, n), _ngrams(reference, n)
        total = sum(hyp.values())
        matched = sum(min(count, ref[gram]) for gram, count in hyp.items())
        if n == 1:
            if matched == 0:
                return 0.0
            precision = matched / total
        else:
            precision = (matched + 1) / (total + 1)
        log_precision += math.log(precision) / 4
    ratio = len(hypothesis) / len(reference)
    brevity = 1.0 if ratio >= 1 else math.exp(1 - 1 / ratio)
    return brevity * math.exp(log_precision)


def levenshtein(reference: list[int], hypothesis: list[int]) -> float:
    """Edit distance between the token sequences divided by the longer length (0 = equal)."""
    return float(Levenshtein.normalized_distance(reference, hypothesis))
