"""prune on the real model: SmolLM2-135M-Instruct (copilot_cli.instruments) as the scorer of
every method, on 36 long code contexts (12 Python, 12 Go, 12 JavaScript files nobody here wrote,
1,024 tokens each, the next 64 scored), at LLMLingua's achieved rates when asked for 0.5 and
0.33: ours (the default method, and --method spread) vs LLMLingua 0.2.2 given the same SmolLM2
as its scorer, random token dropping and Selective-Context. Then speed, tokens/s, ours vs
LLMLingua on the same files with the same model. Needs `make real-models` and `make bench`'s
.venv-llmlingua (else skipped).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_prune import LLMLINGUA_PYTHON, long_context_rows, speed_rows

from copilot_cli import instruments
from copilot_cli.core.models import ModelSpec, load_model

LABEL = "SmolLM2-135M"


def main() -> None:
    if not instruments.available():
        print(f"skipped: no real instruments in {instruments.root()} (make real-models)")
        return
    if not LLMLINGUA_PYTHON.exists():
        print("skipped: no .venv-llmlingua (make bench)")
        return
    torch.set_num_threads(2)
    smollm2 = instruments.root() / instruments.SMOLLM2
    loaded = load_model(ModelSpec(str(smollm2)))
    long_context_rows(loaded, lingua_model=smollm2, model_label=LABEL)
    speed_rows(loaded, lingua_model=smollm2, model_label=LABEL)


if __name__ == "__main__":
    main()
