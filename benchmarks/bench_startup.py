"""What a command costs before it does its own work: `copilot-opt model-info` on the shipped
model (CLI start, imports, model and tokenizer load, fingerprints, the report) vs a plain script
that loads the same model and tokenizer with transformers, each a fresh process, run alternately.

The floor under both is `import torch, transformers` (also reported): loading a model then
imports the model classes and reads the weights, which every way of running the model pays.
Goal (the scale issue): a command's overhead beyond loading the model ≤ 20%.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit, interleaved_seconds

from copilot_cli.paths import SHIPPED_MODEL

ROOT = Path(__file__).resolve().parents[1]
CLI = ROOT / ".venv" / "bin" / "copilot-opt"
PLAIN = f"""
from transformers import AutoModelForCausalLM, AutoTokenizer
model = AutoModelForCausalLM.from_pretrained({str(SHIPPED_MODEL)!r})
tokenizer = AutoTokenizer.from_pretrained({str(SHIPPED_MODEL)!r})
print(sum(p.numel() for p in model.parameters()), len(tokenizer))
"""


def _run(args: list[str]) -> None:
    subprocess.run(args, check=True, capture_output=True)


def main() -> None:
    command = [str(CLI) if CLI.exists() else "copilot-opt", "model-info", "--json"]
    ours, plain = interleaved_seconds(
        lambda: _run(command), lambda: _run([sys.executable, "-c", PLAIN]), rounds=7
    )
    imports, _ = interleaved_seconds(
        lambda: _run([sys.executable, "-c", "import torch, transformers"]),
        lambda: None,
        rounds=7,
    )
    emit(
        "startup: copilot-opt model-info vs a plain transformers load of the same model "
        "(fresh processes)",
        ours * 1000,
        plain * 1000,
        "ms",
        goal="overhead beyond loading the model <= 20% (ratio >= 1/1.2)",
        passed=plain / ours >= 1 / 1.2,
        note=f"import torch + transformers alone {imports * 1000:.0f} ms; the shipped 4.9M model",
    )


if __name__ == "__main__":
    main()
