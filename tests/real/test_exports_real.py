"""quantize --export on SmolLM2-135M: from its transformers folder with a GGUF base beside it
(checked to be the same model's vocabulary), and the compressed-tensors checkpoint loaded by
transformers with `compressed-tensors` close to the original (KL <= 1e-3)."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from copilot_cli import instruments
from copilot_cli.cli import app

pytestmark = pytest.mark.real


@pytest.fixture()
def runner():
    return CliRunner()


def test_a_folder_model_exports_gguf_from_its_base_and_inspect_verifies_it(
    runner, smollm2_dir, tmp_path
):
    base = instruments.root() / instruments.SMOLLM2_F16_TABLE
    out = tmp_path / "q"
    args = ["quantize", "--model", str(smollm2_dir), "-o", str(out), "--int8-scales", "group"]
    made = runner.invoke(app, [*args, "--export", "gguf", "--gguf", str(base), "--no-fidelity"])
    assert made.exit_code == 0, made.output
    report = json.loads((out / "report.json").read_text())
    [export] = report["exports"]
    assert export["source"]["name"] == base.name
    assert export["tensors"]["token_embd.weight"]["type_after"] == "Q8_0"
    assert runner.invoke(app, ["inspect", str(out)]).exit_code == 0


def test_a_gguf_base_of_another_vocabulary_is_refused(runner, smollm2_dir, tmp_path):
    other = instruments.root() / "vocab" / "ggml-vocab-gpt-2.gguf"
    out = tmp_path / "q"
    args = ["quantize", "--model", str(smollm2_dir), "-o", str(out), "--export", "gguf"]
    result = runner.invoke(app, [*args, "--gguf", str(other), "--no-fidelity"])
    assert result.exit_code == 2 and "not the model's tokenizer" in result.stderr, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and not out.exists()


@pytest.mark.filterwarnings("ignore:You passed `quantization_config`")
def test_the_compressed_tensors_export_stays_within_the_gate(smollm2, tmp_path):
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig

    from copilot_cli.core.metrics import compare_logits
    from copilot_cli.quant import QuantizeOptions, quantize_embeddings

    out = tmp_path / "q"
    quantize_embeddings(
        QuantizeOptions(out=out, prompts=None, export=("compressed-tensors",)), smollm2
    )
    loaded = AutoModelForCausalLM.from_pretrained(
        out / "compressed-tensors", quantization_config=CompressedTensorsConfig(dequantize=True)
    ).eval()
    ids = smollm2.tokenizer("def mean(xs):\n    return sum(xs) / len(xs)\n", return_tensors="pt")
    with torch.no_grad():
        base = smollm2.model(**ids).logits[0, :-1].double()
        theirs = loaded(**ids).logits[0, :-1].double()
    metrics = compare_logits(base, theirs, ids.input_ids[0, 1:])
    assert float(metrics.kl.mean()) <= 1e-3
