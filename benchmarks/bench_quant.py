"""quantize: throughput on a 128k x 4096 float32 table vs a plain torch per-row implementation
and torchao's int8 weight-only quantization of an nn.Embedding; quality and memory on the
shipped model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit

from copilot_cli.core.models import ModelSpec, load_model
from copilot_cli.quant import QuantizeOptions, quantize, quantize_embeddings

ROWS, COLS = 128_000, 4096
ROOT = Path(__file__).resolve().parents[1]


def plain_per_row(table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What a user writes by hand: per-row absmax scale, round, clamp, in one go."""
    scale = table.abs().amax(dim=1, keepdim=True) / 127.0
    q = (table / scale.clamp_min(1e-12)).round().clamp(-127, 127).to(torch.int8)
    return q, scale.half()


def best_of(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def throughput() -> None:
    table = torch.randn(ROWS, COLS, generator=torch.Generator().manual_seed(0))
    gigabytes = table.numel() * 4 / 1e9
    t_ours = best_of(lambda: quantize(table, 8))
    t_plain = best_of(lambda: plain_per_row(table))
    emit(
        "INT8 quantize 128k x 4096 fp32: ours vs plain torch per-row",
        gigabytes / t_ours,
        gigabytes / t_plain,
        "GB/s",
        higher_is_better=True,
        goal=">= 0.5 GB/s and ratio >= 1",
        passed=gigabytes / t_ours >= 0.5 and t_ours <= t_plain,
    )
    peers = ROOT / ".bench-peers"
    if not (peers / "torchao").is_dir():
        emit(
            "INT8 quantize 128k x 4096 fp32: ours vs torchao",
            gigabytes / t_ours,
            0.0,
            "GB/s",
            higher_is_better=True,
            note="torchao not installed (make bench installs it)",
        )
        return
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).parent / "peers" / "torchao_embedding.py")],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(peers)},
    )
    t_ao = json.loads(proc.stdout.strip().splitlines()[-1])["seconds"]
    emit(
        "INT8 quantize 128k x 4096 fp32: ours vs torchao IntxWeightOnly PerAxis(0)",
        gigabytes / t_ours,
        gigabytes / t_ao,
        "GB/s",
        higher_is_better=True,
        goal="ratio >= 1",
        passed=t_ours <= t_ao,
        note="torchao runs in a subprocess with torchao on PYTHONPATH; its time excludes "
        "the copy of the table into the nn.Embedding",
    )


def quality() -> None:
    loaded = load_model(ModelSpec())
    with tempfile.TemporaryDirectory() as tmp:
        int8 = quantize_embeddings(QuantizeOptions(out=Path(tmp) / "8", bits=8), loaded).report
        keep = int(0.05 * loaded.config.vocab_size)
        int4 = quantize_embeddings(
            QuantizeOptions(out=Path(tmp) / "4", bits=4, group_size=32, keep_fp16=keep), loaded
        ).report
    emit(
        "INT8 per-row, shipped model: mean KL vs the 1e-3 threshold",
        int8.logit_fidelity.mean_kl,
        1e-3,
        "nats",
        goal="ours <= 1e-3",
        passed=int8.logit_fidelity.mean_kl <= 1e-3,
        note=f"same top-1 {int8['logit_fidelity']['same_top1']:.4f}, "
        f"min row cosine {int8['rows']['cosine_min']:.6f}",
    )
    emit(
        "INT8 per-row, shipped model: min row cosine vs 0.999",
        int8.rows.cosine_min,
        0.999,
        "cosine",
        higher_is_better=True,
        goal=">= 0.999",
        passed=int8.rows.cosine_min >= 0.999,
    )
    emit(
        "INT4 g32 + 5% FP16 rows, shipped model: mean KL vs 1e-2",
        int4.logit_fidelity.mean_kl,
        1e-2,
        "nats",
        goal="ours <= 1e-2",
        passed=int4.logit_fidelity.mean_kl <= 1e-2,
        note=f"same top-1 {int4['logit_fidelity']['same_top1']:.4f}, "
        f"{int4['memory']['bits_per_weight']:.2f} bits/weight",
    )
    emit(
        "INT8 no kept rows: bytes vs FP16 table (scales included)",
        int8.memory.quantized_bytes,
        int8.memory.fp16_bytes,
        "bytes",
        goal="ours/peer <= 0.52",
        passed=int8.memory.ratio_vs_fp16 <= 0.52,
    )


def main() -> None:
    torch.set_num_threads(2)
    quality()
    throughput()


if __name__ == "__main__":
    main()
