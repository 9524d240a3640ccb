"""quantize --export compressed-tensors on SmolLM2-135M: the checkpoint loaded by transformers
with the `compressed-tensors` package, its logits against the original model's (mean KL over
the sample prompts, goal <= 1e-3) and against our own apply path (goal: identical), and the
embedding's bytes. Needs `make real-models`.
"""

from __future__ import annotations

import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = 32


def main() -> None:
    import torch
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig

    from copilot_cli import instruments
    from copilot_cli.core.metrics import compare_logits
    from copilot_cli.core.models import ModelSpec, load_model
    from copilot_cli.core.prompt_sets import load_prompts
    from copilot_cli.core.tokens import prompt_ids
    from copilot_cli.quant import (
        QuantizeOptions,
        load_quantized,
        quantize_embeddings,
        swapped_embeddings,
    )

    folder = instruments.root() / instruments.SMOLLM2
    if not folder.is_dir():
        print("skipped: make real-models first", file=sys.stderr)
        return
    loaded = load_model(ModelSpec(str(folder)))
    model, tokenizer = loaded.model, loaded.tokenizer
    prompts = load_prompts(ROOT / "sample_data" / "prompts.jsonl")[:PROMPTS]
    cases = [torch.tensor([prompt_ids(tokenizer, p.prompt)[:256]]) for p in prompts]
    warnings.filterwarnings("ignore", message="You passed `quantization_config`")
    for scales in ("row", "group"):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "q"
            options = QuantizeOptions(
                out=out, prompts=None, int8_scales=scales, export=("compressed-tensors",)
            )
            result = quantize_embeddings(options, loaded)
            checkpoint = AutoModelForCausalLM.from_pretrained(
                out / "compressed-tensors",
                quantization_config=CompressedTensorsConfig(dequantize=True),
            ).eval()
            module, head = load_quantized(model, out, tokenizer=tokenizer)
            kl_sum, positions, same_ours, kept = (
                0.0,
                0,
                0,
                set(torch.nonzero(module.kept_slot >= 0).flatten().tolist()),
            )
            plain = 0
            with torch.no_grad():
                for ids in cases:
                    base = model(ids).logits[0].double()
                    theirs = checkpoint(ids).logits[0]
                    with swapped_embeddings(model, module, head):
                        ours = model(ids).logits[0]
                    metrics = compare_logits(base[:-1], theirs[:-1].double(), ids[0, 1:])
                    kl_sum += float(metrics.kl.sum())
                    positions += metrics.kl.numel()
                    if not kept & set(ids[0].tolist()):
                        plain += 1
                        same_ours += bool(torch.equal(ours, theirs))
            export = result.report.exports[0]
            table = export.tensors["embed"]
            emit(
                f"compressed-tensors export INT8 ({scales} scales), SmolLM2: mean KL vs the "
                "original (transformers + compressed-tensors)",
                kl_sum / positions * 1e6,
                1e3,
                "µnats",
                goal="<= 1e-3, logits identical to our apply path",
                passed=kl_sum / positions <= 1e-3 and same_ours == plain,
                note=f"{positions} positions of {len(cases)} prompts; logits identical to our "
                f"own apply path on {same_ours} of the {plain} prompts that use none of the "
                f"{export.kept_rows} FP16-kept rows (the export stores them quantized); "
                f"embedding {table['bytes_after']:,} vs {table['bytes_before']:,} bytes "
                f"({table['type_before']})",
            )


def tied_head_in_transformers() -> None:
    """The table of the GGUF Q8_0 export (INT8 groups of 32), the tied output projection
    quantized too, in transformers: what the table costs without llama.cpp's kernels."""
    from copilot_cli import instruments
    from copilot_cli.core.models import ModelSpec, load_model
    from copilot_cli.quant import QuantizeOptions, quantize_embeddings

    loaded = load_model(ModelSpec(str(instruments.root() / instruments.SMOLLM2)))
    with tempfile.TemporaryDirectory() as tmp:
        options = QuantizeOptions(out=Path(tmp) / "q", int8_scales="group", include_lm_head=True)
        fidelity = quantize_embeddings(options, loaded).report.logit_fidelity
    emit(
        "INT8 groups of 32 (Q8_0's table), tied head quantized too, SmolLM2 in transformers: "
        "mean KL vs the original",
        fidelity.mean_kl * 1e6,
        1e3,
        "µnats",
        goal="<= 1e-3",
        passed=fidelity.mean_kl <= 1e-3,
        note=f"same top-1 {fidelity.same_top1:.2%} over {fidelity.positions} positions; the same "
        "table in llama.cpp scores 3.6e-3 (bench_gguf_export): its Q8_0 matmul quantizes the "
        "head's activations to 8 bits",
    )


if __name__ == "__main__":
    main()
    tied_head_in_transformers()
