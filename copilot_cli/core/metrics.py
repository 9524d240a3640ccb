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
