"""Error and memory report of a quantized table, and logit fidelity on sample prompts."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from copilot_cli.core.heap import release_free_memory
from copilot_cli.core.metrics import Accumulator, compare_logits
from copilot_cli.core.prompt_sets import PromptCase
from copilot_cli.core.tokens import prompt_ids
from copilot_cli.quant.apply import swapped_embeddings
from copilot_cli.quant.module import QuantizedEmbedding
from copilot_cli.quant.results import FidelityReport

SQNR_CAP_DB = 200.0  # an exact row has infinite SQNR; report it as this
TRIM_ROWS = 16384  # row_errors hands freed memory back after this many rows


def row_errors(
    original: torch.Tensor, module: QuantizedEmbedding, block_rows: int = 1024
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
        if start % TRIM_ROWS == 0:
            release_free_memory()
    return torch.cat(sqnr), torch.cat(cosine)


# positions the head projects at once (each projection reads the whole table) and positions
# compared at once: the comparison holds about seven float64 [positions, vocab] tensors, 545 MB
# for 64 positions of a 152k vocabulary, 68 MB for 8
FIDELITY_BLOCK = 64
COMPARE_ROWS = 8


@torch.no_grad()
def logit_fidelity(
    model: Any,
    tokenizer: Any,
    prompts: list[PromptCase],
    module: QuantizedEmbedding,
    head: Any,
    max_tokens: int = 512,
) -> FidelityReport:
    """Mean KL(base ‖ quantized) and same-top-1 over every position of every prompt.

    Each forward keeps the decoder's last hidden states and the head runs on a block of
    positions at a time, so no prompt's full logits (155 MB for 512 positions of a 152k
    vocabulary in bf16, twice: base and variant) are ever held; where the model does more
    to its logits than its head (a soft cap), the full logits are used instead."""

    device = next(model.parameters()).device
    module = module.to(device)
    head = None if head is None else head.to(device)
    acc = Accumulator()
    for item in prompts:
        ids = torch.tensor([prompt_ids(tokenizer, item.prompt)[:max_tokens]], device=device)
        base = logit_blocks(model, ids)
        with swapped_embeddings(model, module, head):
            variant = logit_blocks(model, ids)
        targets = ids[0, 1:].cpu()
        for start in range(0, len(targets), FIDELITY_BLOCK):
            end = min(start + FIDELITY_BLOCK, len(targets))
            pair = base(start, end).cpu(), variant(start, end).cpu()
            for row in range(0, end - start, COMPARE_ROWS):
                rows = slice(row, row + COMPARE_ROWS)
                acc.add(compare_logits(pair[0][rows], pair[1][rows], targets[start:end][rows]))
            del pair
            release_free_memory()
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


@dataclass(frozen=True)
class LogitBlocks:
    """The logits of one forward, made a block of positions at a time from the decoder's last
    hidden states by the head (`whole` is None), or sliced from the whole logits where the
    model does more than its head (`whole` holds them)."""

    hidden: torch.Tensor
    head: Any
    whole: torch.Tensor | None

    def __call__(self, start: int, end: int) -> torch.Tensor:
        if self.whole is not None:
            return self.whole[start:end]
        return self.head(self.hidden[start:end])


def logit_blocks(model: Any, ids: torch.Tensor) -> LogitBlocks:
    """One forward of `ids` that computes only the last position's logits and keeps the
    decoder's hidden states. The head on the last position must give exactly the model's own
    logits there, else the model post-processes its logits (a soft cap) and the whole logits
    are computed (and held) the usual way."""
    captured: dict[str, torch.Tensor] = {}

    def grab(_module: Any, _args: Any, output: Any) -> None:
        captured["hidden"] = output[0] if isinstance(output, tuple) else output.last_hidden_state

    handle = model.get_decoder().register_forward_hook(grab)
    try:
        last = model(ids, logits_to_keep=1).logits[0, -1]
    finally:
        handle.remove()
    hidden, head = captured["hidden"][0], model.get_output_embeddings()
    if torch.equal(head(hidden[-1:])[0], last):
        return LogitBlocks(hidden, head, None)
    return LogitBlocks(hidden, head, model(ids).logits[0])
