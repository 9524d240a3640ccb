"""Time torchao's int8 weight-only quantization (PerAxis(0)) of a 128k x 4096 nn.Embedding.

Run with torchao on PYTHONPATH (benchmarks/bench_quant.py does it); prints {"seconds": s}.
"""

from __future__ import annotations

import json
import time

import torch
from torchao.quantization import IntxWeightOnlyConfig, quantize_
from torchao.quantization.granularity import PerAxis

ROWS, COLS = 128_000, 4096


def main() -> None:
    torch.set_num_threads(2)
    table = torch.randn(ROWS, COLS, generator=torch.Generator().manual_seed(0))
    best = float("inf")
    for _ in range(3):
        module = torch.nn.Sequential(torch.nn.Embedding(ROWS, COLS, _weight=table.clone()))
        started = time.perf_counter()
        quantize_(
            module,
            IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerAxis(0)),
            filter_fn=lambda m, _: isinstance(m, torch.nn.Embedding),
        )
        best = min(best, time.perf_counter() - started)
    print(json.dumps({"seconds": best}))


if __name__ == "__main__":
    main()
