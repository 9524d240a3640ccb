"""Modules that keep a quantized table in memory and dequantize only what is needed."""

from __future__ import annotations

import torch
from torch import nn

from copilot_cli.quant.scheme import QuantizedTable, dequantize_rows


class QuantizedEmbedding(nn.Module):
    """Drop-in for nn.Embedding: INT8/INT4 rows plus FP16 rows for the most used tokens.

    Only the rows looked up are dequantized; kept rows are served bit-exactly from FP16.
    """

    def __init__(
        self,
        table: QuantizedTable,
        kept_ids: torch.Tensor,
        kept_rows: torch.Tensor,
        dtype: torch.dtype,
        padding_idx: int | None = None,
    ) -> None:
        super().__init__()
        self.bits = table.bits
        self.group_size = table.group_size
        self.num_embeddings = table.rows
        self.embedding_dim = table.cols
        self.padding_idx = padding_idx
        self.output_dtype = dtype
        self.register_buffer("q", table.q)
        self.register_buffer("scales", table.scales)
        self.register_buffer("kept_rows", kept_rows.to(torch.float16))
        slot = torch.full((table.rows,), -1, dtype=torch.int32)
        slot[kept_ids.long()] = torch.arange(kept_ids.numel(), dtype=torch.int32)
        self.register_buffer("kept_slot", slot)

    def table(self) -> QuantizedTable:
        return QuantizedTable(
            bits=self.bits,
            group_size=self.group_size,
            q=self.q,
            scales=self.scales,
            cols=self.embedding_dim,
        )

    def nbytes(self) -> int:
        """Bytes held by the module (what replaced the float table)."""
        return sum(b.numel() * b.element_size() for b in self.buffers())

    def lookup(self, ids: torch.Tensor) -> torch.Tensor:
        rows = dequantize_rows(self.table(), ids)
        slots = self.kept_slot[ids]
        kept = slots >= 0
        if bool(kept.any()):
            rows[kept] = self.kept_rows[slots[kept].long()].float()
        return rows

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lookup(input_ids).to(self.output_dtype)

    def extra_repr(self) -> str:
        return (
            f"{self.num_embeddings}, {self.embedding_dim}, int{self.bits}"
            f"{'' if self.group_size is None else f', group={self.group_size}'}, "
            f"fp16 rows={int((self.kept_slot >= 0).sum())}"
        )


class QuantizedLMHead(nn.Module):
    """Output projection from a quantized table, dequantized block by block per forward."""

    def __init__(
        self,
        embedding: QuantizedEmbedding,
        bias: torch.Tensor | None = None,
        block_rows: int = 8192,
    ) -> None:
        super().__init__()
        self.embedding = embedding  # shared with the input embedding when weights are tied
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)
        self.block_rows = block_rows
        self.in_features = embedding.embedding_dim
        self.out_features = embedding.num_embeddings

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        # written in place block by block: never the blocks and their concatenation at once
        logits = hidden.new_empty((*hidden.shape[:-1], self.out_features))
        for start in range(0, self.out_features, self.block_rows):
            end = min(start + self.block_rows, self.out_features)
            ids = torch.arange(start, end, device=hidden.device)
            weight = self.embedding.lookup(ids).to(hidden.dtype)
            logits[..., start:end] = hidden @ weight.T
        return logits if self.bias is None else logits + self.bias
