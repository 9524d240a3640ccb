"""Symmetric INT8 per-row and INT4 group-wise quantization of embedding tables.

INT8 (per row):   scale_r = fp16(max|x_r| / 127);  q = clamp(round(x / scale_r), -127, 127)
INT8 (per group): the same with one scale per group of `group_size` columns of a row
                  (groups of 32: exactly llama.cpp's Q8_0 blocks)
INT4 (per group): scale_g = fp16(max|x_g| / 7);    q = clamp(round(x / scale_g), -7, 7),
                  two values per byte (low nibble = even column), stored as q + 8.
The scale is rounded to fp16 *before* dividing, so dequantization (q × scale, in float32) is
exactly what is stored. An all-zero row or group gets scale 0 and q 0 (no division by zero).
Work is done in row blocks so a 2 GB table never needs a second full-size float copy.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from copilot_cli.core.options import OptionError

SUPPORTED_BITS = (8, 4)
SUPPORTED_GROUPS = (32, 64, 128)
_BLOCK_ROWS = 4096


@dataclass
class QuantizedTable:
    """A quantized [rows, cols] table."""

    bits: int
    group_size: int | None  # None = one scale per row (INT8)
    q: torch.Tensor  # int8 [rows, cols] or uint8 [rows, cols // 2]
    scales: torch.Tensor  # float16 [rows] or [rows, cols // group_size]
    cols: int

    @property
    def rows(self) -> int:
        return int(self.q.shape[0])

    @property
    def nbytes(self) -> int:
        return self.q.numel() * self.q.element_size() + self.scales.numel() * 2


def check_finite(table: torch.Tensor, what: str) -> None:
    """Refuse NaN/Inf rows, naming the first token ids (a NaN scale must never be written)."""
    bad = torch.cat(  # block by block: no table-sized mask at once
        [
            torch.nonzero(~torch.isfinite(table[start : start + _BLOCK_ROWS]).all(dim=1)).flatten()
            + start
            for start in range(0, table.shape[0], _BLOCK_ROWS)
        ]
    )
    if bad.numel():
        ids = ", ".join(str(i) for i in bad[:10].tolist())
        more = f" and {bad.numel() - 10} more" if bad.numel() > 10 else ""
        raise OptionError(
            "model", f"{what} has NaN or Inf values in the rows of token ids {ids}{more}"
        )


def check_bits(bits: int, group_size: int, cols: int, *, grouped: bool | None = None) -> None:
    if bits not in SUPPORTED_BITS:
        raise OptionError(
            "bits", f"{bits} is not supported; choose one of {', '.join(map(str, SUPPORTED_BITS))}"
        )
    if bits == 4 if grouped is None else grouped:
        if group_size not in SUPPORTED_GROUPS:
            raise OptionError(
                "group_size",
                f"{group_size} is not supported; choose one of "
                f"{', '.join(map(str, SUPPORTED_GROUPS))}",
            )
        if cols % group_size:
            raise OptionError(
                "group_size", f"the hidden size {cols} is not a multiple of {group_size}"
            )


def _safe(scale: torch.Tensor) -> torch.Tensor:
    return torch.where(scale == 0, torch.ones_like(scale), scale)


def quantize_int8(table: torch.Tensor, group_size: int | None = None) -> QuantizedTable:
    """INT8 with one fp16 scale per row (`group_size` None) or per group of columns."""
    rows, cols = table.shape
    width = group_size or cols
    groups = cols // width
    q = torch.empty((rows, cols), dtype=torch.int8)
    scales = torch.empty((rows, groups), dtype=torch.float16)
    for start in range(0, rows, _BLOCK_ROWS):
        block = table[start : start + _BLOCK_ROWS].to(torch.float32, copy=True)
        block = block.reshape(-1, groups, width)
        scale = (block.abs().amax(dim=2) / 127.0).half()
        scales[start : start + block.shape[0]] = scale
        divided = block.div_(_safe(scale.float()).unsqueeze(2))
        q[start : start + block.shape[0]] = (
            divided.round_().clamp_(-127, 127).to(torch.int8).reshape(-1, cols)
        )
    if group_size is None:
        scales = scales.reshape(rows)
    return QuantizedTable(bits=8, group_size=group_size, q=q, scales=scales, cols=cols)


def quantize_int4(table: torch.Tensor, group_size: int) -> QuantizedTable:
    rows, cols = table.shape
    groups = cols // group_size
    packed = torch.empty((rows, cols // 2), dtype=torch.uint8)
    scales = torch.empty((rows, groups), dtype=torch.float16)
    for start in range(0, rows, _BLOCK_ROWS):
        block = table[start : start + _BLOCK_ROWS].to(torch.float32, copy=True)
        block = block.reshape(-1, groups, group_size)
        scale = (block.abs().amax(dim=2) / 7.0).half()
        scales[start : start + block.shape[0]] = scale
        q = block.div_(_safe(scale.float()).unsqueeze(2)).round_().clamp_(-7, 7)
        q = (q.to(torch.int16) + 8).to(torch.uint8).reshape(-1, cols)
        packed[start : start + block.shape[0]] = q[:, 0::2] | (q[:, 1::2] << 4)
    return QuantizedTable(bits=4, group_size=group_size, q=packed, scales=scales, cols=cols)


def quantize(
    table: torch.Tensor, bits: int, group_size: int = 32, *, int8_groups: bool = False
) -> QuantizedTable:
    """Quantize a [rows, cols] float table (rows must be finite); INT8 per row, or per group
    of `group_size` columns with `int8_groups`."""
    check_bits(bits, group_size, table.shape[1], grouped=bits == 4 or int8_groups)
    if bits == 8:
        return quantize_int8(table, group_size if int8_groups else None)
    return quantize_int4(table, group_size)


def dequantize_rows(table: QuantizedTable, rows: torch.Tensor) -> torch.Tensor:
    """float32 values of the given rows (any shape of row ids; output adds a `cols` axis)."""
    flat = rows.reshape(-1)
    if table.bits == 8 and table.group_size is None:
        out = table.q[flat].float() * table.scales[flat].float().unsqueeze(1)
    elif table.bits == 8:
        groups = table.scales[flat].float().repeat_interleave(table.group_size, dim=1)
        out = table.q[flat].float() * groups
    else:
        packed = table.q[flat]
        q = torch.empty((flat.numel(), table.cols), dtype=torch.int8, device=packed.device)
        q[:, 0::2] = (packed & 0x0F).to(torch.int8) - 8
        q[:, 1::2] = (packed >> 4).to(torch.int8) - 8
        groups = table.scales[flat].float().repeat_interleave(table.group_size, dim=1)
        out = q.float() * groups
    return out.reshape(*rows.shape, table.cols)


def dequantize_all(table: QuantizedTable, block_rows: int = _BLOCK_ROWS) -> torch.Tensor:
    return torch.cat(
        [
            dequantize_rows(table, torch.arange(s, min(s + block_rows, table.rows)))
            for s in range(0, table.rows, block_rows)
        ]
    )
