"""Error and memory report of a quantized table, and logit fidelity on sample prompts."""

from __future__ import annotations

import math
from typing import Any

import torch

from copilot_cli.core.metrics import Accumulator, compare_logits
from copilot_cli.quant.apply import swapped_embeddings
from copilot_cli.quant.module import QuantizedEmbedding
from copilot_cli.quant.results import FidelityReport

SQNR_CAP_DB = 200.0  # an exact row has infinite SQNR; report it as this


def row_errors(
    original: torch.Tensor, module: QuantizedEmbedding, block_rows: int = 4096
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row SQNR (dB) and cosine similarity of the served rows vs the original float rows."""
    sqnr, cosine = [], []
    for start in range(0, original.shape[0], block_rows):
        ids = torch.arange(start, min(start + block_rows, original.shape[0]))
        x = original[ids].double()
        x_hat = module.lookup(ids).double()
        signal = x.pow(2).sum(1)
        noise = (x - x_hat).pow(2).sum(1)
        ratio = torch.where(
            noise > 0, signal / noise.clamp_min(1e-300), torch.full_like(signal, math.inf)
        )
        db = (10 * torch.log10(ratio)).clamp(max=SQNR_CAP_DB)
        db = torch.where(signal == 0, torch.full_like(db, SQNR_CAP_DB), db)
        norms = x.norm(dim=1) * x_hat.norm(dim=1)
        cos = torch.where(
            norms > 0,
            (x * x_hat).sum(1) / norms.clamp_min(1e-300),
            torch.where(signal == 0, torch.ones_like(norms), torch.zeros_like(norms)),
        )
        sqnr.append(db)
        cosine.append(cos)
    return torch.cat(sqnr), torch.cat(cosine)


# positions compared at once: the float32 log-probabilities of a block of a 152k vocabulary
# are 39 MB, of a whole 512-token prompt 311 MB (and the comparison holds several)
FIDELITY_BLOCK = 64


@torch.no_grad()
def logit_fidelity(
    model: Any,
    tokenizer: Any,
    prompts: list[dict[str, Any]],
    module: QuantizedEmbedding,
    head: Any,
    max_tokens: int = 512,
) -> FidelityReport:
    """Mean KL(base ‖ quantized) and same-top-1 over every position of every prompt."""
    from copilot_cli.core.tokens import prompt_ids

    device = next(model.parameters()).device
    module = module.to(device)
    head = None if head is None else head.to(device)
    acc = Accumulator()
    for item in prompts:
        ids = torch.tensor([prompt_ids(tokenizer, item["prompt"])[:max_tokens]], device=device)
        base = model(ids).logits[0]
        with swapped_embeddings(model, module, head):
            variant = model(ids).logits[0]
        targets = ids[0, 1:].cpu()
        for start in range(0, len(targets), FIDELITY_BLOCK):  # float32 copies a block at a time
            end = min(start + FIDELITY_BLOCK, len(targets))
            pair = base[start:end].cpu(), variant[start:end].cpu()
            acc.add(compare_logits(*pair, targets[start:end]))
        del base, variant
    summary = acc.summary()
    return FidelityReport(
        prompts=len(prompts),
        positions=summary.positions,
        mean_kl=summary.kl_mean,
        kl_se=summary.kl_se,
        max_kl=summary.kl_max,
        same_top1=summary.same_top1,
        ppl_ratio=summary.ppl_ratio,
    )
