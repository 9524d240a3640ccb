import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from copilot_cli.core.metrics import (
    Accumulator,
    SparseLogprobs,
    Summary,
    compare_logits,
    compare_sparse,
    compare_topk,
)
from copilot_cli.regress.gate import Thresholds, verdict
from copilot_cli.regress.textmetrics import bleu4, levenshtein


def test_kl_matches_a_direct_computation():
    base = torch.tensor([[2.0, 1.0, 0.0]])
    variant = torch.tensor([[0.0, 1.0, 0.5]])
    p = torch.softmax(base.double(), -1)
    q = torch.softmax(variant.double(), -1)
    expected = float((p * (p / q).log()).sum())
    metrics = compare_logits(base, variant, torch.tensor([0]))
    assert metrics.kl.item() == pytest.approx(expected, rel=1e-12)
    assert metrics.same_top1.item() == 0.0  # base prefers token 0, the variant token 1
    assert metrics.nll_base.item() == pytest.approx(-math.log(p[0, 0].item()))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 12))
def test_topk_kl_is_a_lower_bound_and_exact_with_full_k(seed, k):
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(4, 12, generator=g) * 3
    variant = base + torch.randn(4, 12, generator=g)
    targets = torch.randint(0, 12, (4,), generator=g)
    full = compare_logits(base, variant, targets)
    log_p = torch.log_softmax(base.double(), -1)  # exact math; stored baselines add ~1e-6 noise
    values, ids = log_p.topk(k, -1)
    target_lp = log_p.gather(1, targets.unsqueeze(1)).squeeze(1)
    approx = compare_topk(ids, values, target_lp, variant, targets)
    assert (approx.kl <= full.kl * (1 + 1e-5) + 1e-6).all()
    if k == 12:
        assert torch.allclose(approx.kl, full.kl, atol=1e-5)
    assert torch.equal(approx.same_top1, full.same_top1)
    assert torch.allclose(approx.nll_base, full.nll_base, atol=1e-5)


def _engine_topk(variant: torch.Tensor, targets: torch.Tensor, k: int) -> SparseLogprobs:
    """What an engine returns: its own top-k log-probabilities, best first, plus the target."""
    log_q = torch.log_softmax(variant.double(), -1)
    values, ids = log_q.topk(k, -1)
    ids = torch.cat([ids, torch.full((len(ids), 1), -1)], 1)
    values = torch.cat([values, torch.full((len(ids), 1), -math.inf, dtype=values.dtype)], 1)
    for row, target in enumerate(targets.tolist()):
        if target not in ids[row, :k].tolist():
            ids[row, k], values[row, k] = target, log_q[row, target]
    return SparseLogprobs(ids, values, cap=values[:, k - 1] if k < 12 else None)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 12))
def test_sparse_variant_kl_is_a_lower_bound_and_exact_with_the_whole_vocabulary(seed, k):
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(4, 12, generator=g) * 3
    variant = base + torch.randn(4, 12, generator=g)
    targets = torch.randint(0, 12, (4,), generator=g)
    full = compare_logits(base, variant, targets)
    sparse = _engine_topk(variant, targets, k)
    approx = compare_sparse(base, sparse, targets)
    lumped = compare_sparse(base, SparseLogprobs(sparse.ids, sparse.logprobs), targets)
    assert (approx.kl >= lumped.kl - 1e-12).all()  # the cap only tightens the bound
    assert (approx.kl <= full.kl * (1 + 1e-9) + 1e-12).all()
    if k == 12:
        assert torch.allclose(approx.kl, full.kl, rtol=1e-9, atol=1e-12)
        assert torch.allclose(approx.delta_p, full.delta_p, atol=1e-12)
    assert torch.equal(approx.same_top1, full.same_top1)
    if k >= 5:
        assert torch.equal(approx.top5_overlap, full.top5_overlap)
    assert torch.allclose(approx.nll_base, full.nll_base, atol=1e-12)
    assert torch.allclose(approx.nll_variant, full.nll_variant, atol=1e-12)


def test_a_sparse_row_without_its_target_is_refused():
    base = torch.zeros(1, 6)
    sparse = SparseLogprobs(torch.tensor([[0, 1]]), torch.log(torch.tensor([[0.5, 0.2]])))
    with pytest.raises(ValueError, match="target"):
        compare_sparse(base, sparse, torch.tensor([4]))


def test_summary_statistics():
    acc = Accumulator()
    base = torch.zeros(100, 5)
    acc.add(compare_logits(base, base, torch.zeros(100, dtype=torch.long)))
    summary = acc.summary()
    assert summary.kl_mean == 0 and summary.same_top1 == 1 and summary.ppl_ratio == 1


def test_nan_logits_fail_the_gate():
    acc = Accumulator()
    variant = torch.zeros(10, 5)
    variant[3, 2] = float("nan")
    acc.add(compare_logits(torch.zeros(10, 5), variant))
    summary = acc.summary()
    reasons = verdict(summary, {}, None, Thresholds())
    assert summary.non_finite == 1 and reasons and "NaN" in reasons[0]


def _summary(mean, se, top1=1.0):
    return Summary(
        positions=1000,
        kl_mean=mean,
        kl_se=se,
        kl_percentiles={},
        kl_max=mean,
        same_top1=top1,
        same_top1_se=0.0,
        delta_p_mean=0,
        delta_p_rms=0,
        top5_overlap=1,
    )


def test_gate_uses_the_upper_confidence_bound():
    thresholds = Thresholds(max_mean_kl=1e-3)
    assert verdict(_summary(8e-4, 1e-5), {}, None, thresholds) == []
    assert verdict(_summary(8e-4, 2e-4), {}, None, thresholds)  # point estimate passes, bound not
    assert verdict(_summary(1e-5, 0, top1=0.95), {}, None, thresholds)
    assert verdict(_summary(1e-5, 0), {"p": 0.5}, None, thresholds)  # per-prompt KL


def test_bleu_and_levenshtein():
    assert bleu4([1, 2, 3, 4, 5], [1, 2, 3, 4, 5]) == 1.0
    assert bleu4([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == 0.0
    partial = bleu4([1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 9, 9])
    assert 0 < partial < 1
    assert bleu4([1, 2, 3, 4], [1, 2]) < bleu4([1, 2, 3, 4], [1, 2, 3, 4])  # brevity penalty
    assert levenshtein([1, 2, 3], [1, 2, 3]) == 0.0
    assert levenshtein([1, 2, 3, 4], [1, 2, 9, 4]) == 0.25
