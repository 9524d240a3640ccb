"""Logit-level comparison metrics shared by quantize, prune and regress.

Per scored position t, with p = softmax(base logits), q = softmax(variant logits):
    kl           KL(p ‖ q) = Σ p (log p − log q), in float64
    same_top1    argmax p == argmax q
    delta_p      q[argmax p] − p[argmax p]   (probability the variant gives the base's top token)
    top5_overlap |top5(p) ∩ top5(q)| / 5
    nll_base, nll_variant   −log p[target], −log q[target] (when the next token is known)

Aggregates follow llama.cpp's `llama-perplexity --kl-divergence` report: mean ± standard error,
median and high percentiles of KL; same-top-1 share ± binomial SE; mean and RMS Δp; and the
perplexity ratio exp(mean nll_variant − mean nll_base).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch

PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)


@dataclass
class PositionMetrics:
    """Per-position values for one batch (1-D float64 tensors of equal length)."""

    kl: torch.Tensor
    same_top1: torch.Tensor
    delta_p: torch.Tensor
    top5_overlap: torch.Tensor
    nll_base: torch.Tensor | None = None
    nll_variant: torch.Tensor | None = None


def compare_logits(
    base: torch.Tensor, variant: torch.Tensor, targets: torch.Tensor | None = None
) -> PositionMetrics:
    """Metrics for each row of `base` and `variant` logits ([positions, vocab])."""
    if base.shape != variant.shape:
        raise ValueError(f"logit shapes differ: {tuple(base.shape)} vs {tuple(variant.shape)}")
    log_p = torch.log_softmax(base.double(), dim=-1)
    log_q = torch.log_softmax(variant.double(), dim=-1)
    p = log_p.exp()
    kl = (p * (log_p - log_q)).sum(-1).clamp_min(0.0)
    top_base = log_p.argmax(-1)
    top_var = log_q.argmax(-1)
    rows = torch.arange(base.shape[0])
    delta_p = log_q[rows, top_base].exp() - p[rows, top_base]
    k = min(5, base.shape[-1])
    top5_b = log_p.topk(k, dim=-1).indices
    top5_v = log_q.topk(k, dim=-1).indices
    overlap = (top5_b.unsqueeze(-1) == top5_v.unsqueeze(-2)).any(-1).double().sum(-1) / k
    metrics = PositionMetrics(
        kl=kl, same_top1=(top_base == top_var).double(), delta_p=delta_p, top5_overlap=overlap
    )
    if targets is not None:
        metrics.nll_base = -log_p[rows, targets]
        metrics.nll_variant = -log_q[rows, targets]
    return metrics


def compare_topk(
    topk_ids: torch.Tensor,
    topk_logp: torch.Tensor,
    target_logp: torch.Tensor,
    variant: torch.Tensor,
    targets: torch.Tensor,
) -> PositionMetrics:
    """Metrics against a baseline stored as top-k log-probabilities plus the residual mass.

    KL is computed over the k stored tokens plus one "rest" bucket holding the remaining mass
    of each distribution. By the log-sum inequality this is a lower bound of the full KL and
    equals it when k covers the vocabulary; same-top-1, Δp and the base NLL are exact.
    """
    log_q = torch.log_softmax(variant.double(), dim=-1)
    log_p_k = topk_logp.double()
    p_k = log_p_k.exp()
    log_q_k = log_q.gather(1, topk_ids.long())
    p_rest = (1 - p_k.sum(-1)).clamp_min(0.0)
    q_rest = (1 - log_q_k.exp().sum(-1)).clamp_min(1e-12)
    rest = torch.where(
        p_rest > 1e-6,  # below that the residual is float32 rounding, not mass
        p_rest * (p_rest.clamp_min(1e-300).log() - q_rest.log()),
        torch.zeros_like(p_rest),
    )
    kl = ((p_k * (log_p_k - log_q_k)).sum(-1) + rest).clamp_min(0.0)
    rows = torch.arange(variant.shape[0])
    top_base = topk_ids[:, 0].long()
    k = min(5, topk_ids.shape[1])
    top5_v = log_q.topk(k, dim=-1).indices
    overlap = (topk_ids[:, :k].long().unsqueeze(-1) == top5_v.unsqueeze(-2)).any(-1).double()
    return PositionMetrics(
        kl=kl,
        same_top1=(top_base == log_q.argmax(-1)).double(),
        delta_p=log_q[rows, top_base].exp() - p_k[:, 0],
        top5_overlap=overlap.sum(-1) / k,
        nll_base=-target_logp.double(),
        nll_variant=-log_q[rows, targets.long()],
    )


@dataclass(frozen=True)
class SparseLogprobs:
    """A variant known at a few token ids per position (an engine's top-k log-probabilities,
    sorted best first, each row's target among them): `ids` and `logprobs` [positions, k],
    columns past a row's own count padded with id -1 and log-probability -inf."""

    ids: torch.Tensor
    logprobs: torch.Tensor
    cap: torch.Tensor | None = None  # per row: no unlisted id has a higher log-probability

    def argmax(self, dim: int = -1) -> torch.Tensor:
        """The variant's own top-1 token per position (its first column)."""
        return self.ids[:, 0]


def compare_sparse(
    base: torch.Tensor, variant: SparseLogprobs, targets: torch.Tensor
) -> PositionMetrics:
    """Metrics of full base logits against a variant known at the ids it lists (S).

    KL is Σ over S of p (log p − log q) plus a lower bound for the ids outside S: the larger
    of one "rest" bucket, p_rest log(p_rest / q_rest) (log-sum inequality), and, where the
    variant's `cap` is known (S holds its top-k, so no other q exceeds the k-th),
    Σ p log p − p_rest log cap over those ids. A lower bound of the full KL, equal to it when S
    covers the vocabulary.
    same-top-1 and top-5 overlap are exact (the variant's own best ids lead S); Δp uses
    q[argmax p] where that token is in S, else the least q in S (an upper bound of it).
    """
    log_p = torch.log_softmax(base.double(), dim=-1)
    ids, known = variant.ids.long(), variant.ids >= 0
    safe = ids.clamp_min(0)
    log_q = torch.where(
        known, variant.logprobs.double(), torch.full_like(safe, -math.inf, dtype=torch.float64)
    )
    log_p_s = torch.where(known, log_p.gather(1, safe), torch.full_like(log_q, -math.inf))
    p_s, q_s = log_p_s.exp(), log_q.exp()
    p_rest = (1 - p_s.sum(-1)).clamp_min(0.0)
    q_rest = (1 - q_s.sum(-1)).clamp_min(1e-12)
    inside = torch.where(known, p_s * (log_p_s - log_q), torch.zeros_like(p_s)).sum(-1)
    rest = p_rest * (p_rest.clamp_min(1e-300).log() - q_rest.log())
    if variant.cap is not None:
        p = log_p.exp()
        outside = torch.special.xlogy(p, p).sum(-1) - torch.special.xlogy(p_s, p_s).sum(-1)
        rest = torch.maximum(rest, outside - p_rest * variant.cap.double())
    rest = torch.where(p_rest > 1e-9, rest, 0.0)
    rows = torch.arange(base.shape[0])
    top_base = log_p.argmax(-1)
    hit = (ids == top_base.unsqueeze(-1)) & known
    least = torch.where(known, q_s, torch.full_like(q_s, math.inf)).amin(-1)
    q_top = torch.where(hit.any(-1), (q_s * hit).sum(-1), least.clamp_max(q_rest))
    k = min(5, base.shape[-1], ids.shape[1])
    top5_p = log_p.topk(k, dim=-1).indices
    overlap = (top5_p.unsqueeze(-1) == ids[:, :k].unsqueeze(-2)).any(-1).double().sum(-1) / k
    is_target = (ids == targets.long().unsqueeze(-1)) & known
    if not bool(is_target.any(-1).all()):
        raise ValueError("a sparse variant row does not hold its target token")
    return PositionMetrics(
        kl=(inside + rest).clamp_min(0.0),
        same_top1=(top_base == ids[:, 0]).double(),
        delta_p=q_top - log_p[rows, top_base].exp(),
        top5_overlap=overlap,
        nll_base=-log_p[rows, targets.long()],
        nll_variant=-torch.where(is_target, log_q, 0.0).sum(-1),
    )


@dataclass
class Summary:
    """Aggregate statistics over all scored positions."""

    positions: int
    kl_mean: float
    kl_se: float
    kl_percentiles: dict[str, float]
    kl_max: float
    same_top1: float
    same_top1_se: float
    delta_p_mean: float
    delta_p_rms: float
    top5_overlap: float
    ppl_base: float | None = None
    ppl_variant: float | None = None
    ppl_ratio: float | None = None
    non_finite: int = 0

    @property
    def kl_upper(self) -> float:
        """One-sided 95% upper confidence bound of the mean KL."""
        return self.kl_mean + 1.645 * self.kl_se

    @property
    def same_top1_lower(self) -> float:
        """One-sided 95% lower confidence bound of the same-top-1 share."""
        return self.same_top1 - 1.645 * self.same_top1_se

    def to_dict(self) -> dict:
        out = asdict(self)
        out["kl_upper95"] = self.kl_upper
        out["same_top1_lower95"] = self.same_top1_lower
        return out


@dataclass
class Accumulator:
    """Collects per-position metrics batch by batch (only small vectors are kept)."""

    parts: list[PositionMetrics] = field(default_factory=list)

    def add(self, metrics: PositionMetrics) -> None:
        self.parts.append(metrics)

    def _cat(self, name: str) -> torch.Tensor | None:
        values = [getattr(p, name) for p in self.parts]
        if any(v is None for v in values) or not values:
            return None
        return torch.cat(values)

    def values(self, name: str) -> torch.Tensor:
        out = self._cat(name)
        return out if out is not None else torch.empty(0, dtype=torch.float64)

    def summary(self) -> Summary:
        return summarize(self)


def _se(values: torch.Tensor) -> float:
    n = values.numel()
    return float(values.std(unbiased=True) / math.sqrt(n)) if n > 1 else 0.0


def summarize(acc: Accumulator) -> Summary:
    """Aggregate an accumulator. Non-finite KL values make every statistic non-finite."""
    kl = acc.values("kl")
    if kl.numel() == 0:
        raise ValueError("no positions were scored")
    non_finite = int((~torch.isfinite(kl)).sum())
    same = acc.values("same_top1")
    delta = acc.values("delta_p")
    quantiles = torch.tensor([q / 100 for q in PERCENTILES], dtype=torch.float64)
    finite_kl = kl if non_finite == 0 else torch.full_like(kl, float("nan"))
    pct = torch.quantile(finite_kl, quantiles) if finite_kl.numel() else quantiles * float("nan")
    top1 = float(same.mean())
    summary = Summary(
        positions=int(kl.numel()),
        kl_mean=float(finite_kl.mean()),
        kl_se=_se(finite_kl),
        kl_percentiles={f"p{q:g}": float(v) for q, v in zip(PERCENTILES, pct, strict=True)},
        kl_max=float(finite_kl.max()),
        same_top1=top1,
        same_top1_se=math.sqrt(top1 * (1 - top1) / same.numel()),
        delta_p_mean=float(delta.mean()),
        delta_p_rms=float(delta.pow(2).mean().sqrt()),
        top5_overlap=float(acc.values("top5_overlap").mean()),
        non_finite=non_finite,
    )
    nll_b, nll_v = acc._cat("nll_base"), acc._cat("nll_variant")
    if nll_b is not None and nll_v is not None:
        summary.ppl_base = math.exp(float(nll_b.mean()))
        summary.ppl_variant = math.exp(min(float(nll_v.mean()), 700.0))
        summary.ppl_ratio = math.exp(min(float(nll_v.mean() - nll_b.mean()), 700.0))
    return summary
