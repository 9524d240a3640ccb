"""quantize --export gguf judged by llama.cpp, and regress --engine llama.cpp: llama.cpp loads
and generates from an export, the gate scores exports and slot folders with the other engines'
statistics and exit codes, the null control is exactly zero, and our mean KL agrees with
llama.cpp's own KL tool (llama-perplexity --kl-divergence) on the same tokens. Needs `make
llamacpp-env`, `make real-models` and `make llama-tools` (make test-llamacpp does all)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from copilot_cli.cli import app

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def originals() -> dict[str, Path]:
    from copilot_cli import instruments

    f16 = instruments.root() / instruments.SMOLLM2_F16_TABLE
    if not f16.is_file():
        pytest.skip(f"no SmolLM2 GGUFs in {instruments.root()} (make real-models)")
    return {"f16": f16, "shipped": instruments.root() / instruments.SMOLLM2_GGUF}


@pytest.fixture(scope="module")
def loaded(originals) -> dict[str, object]:
    """Each original loaded once in transformers (tokenizer, fingerprints, cases)."""
    from copilot_cli.core.models import ModelSpec, load_model

    return {name: load_model(ModelSpec(str(path))) for name, path in originals.items()}


@pytest.fixture(scope="module")
def exported(originals, loaded, tmp_path_factory) -> dict[str, Path]:
    from copilot_cli.core.models import ModelSpec
    from copilot_cli.quant import QuantizeOptions, quantize_embeddings

    root = tmp_path_factory.mktemp("exports")
    out = {}
    flags = {
        "q8": ("f16", {"int8_scales": "group"}),
        "q4": ("f16", {"bits": 4}),
        "q8-shipped": ("shipped", {"int8_scales": "group"}),
    }
    for name, (original, extra) in flags.items():
        options = QuantizeOptions(
            out=root / name,
            prompts=None,
            export=("gguf",),
            model=ModelSpec(str(originals[original])),
            **extra,
        )
        quantize_embeddings(options, loaded[original])
        out[name] = root / name / "model.gguf"
    return out


@pytest.fixture(scope="module")
def prompts(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("prompts") / "p.jsonl"
    lines = (REPO / "sample_data" / "prompts.jsonl").read_text().splitlines()[:6]
    path.write_text("\n".join(lines) + "\n")
    return path


def _gate(loaded, original: Path, prompts: Path, *variants: str, by: str | None = None) -> object:
    """regress --engine llama.cpp through the library, the original already loaded."""
    from copilot_cli.core.models import ModelSpec
    from copilot_cli.regress import RegressOptions, run_regress

    options = RegressOptions(
        prompts=prompts,
        variants=variants,
        engine="llama.cpp",
        original=by,
        gen_tokens=8,
        max_tokens=96,
        model=ModelSpec(str(original)),
    )
    return run_regress(options, loaded)


def _regress(original: Path, prompts: Path, *args: str) -> tuple[int, dict]:
    base = ["regress", "--engine", "llama.cpp", "--model", str(original), "--prompts"]
    result = CliRunner().invoke(
        app, [*base, str(prompts), *args, "--gen-tokens", "8", "--max-tokens", "96", "--json", "-"]
    )
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)


def test_llama_cpp_loads_an_export_and_its_buffer_shrinks_by_the_table(originals, exported):
    import llama_cpp

    from copilot_cli.serving.llamacpp import open_model

    sizes, texts = {}, {}
    for name, path in {"f16": originals["f16"], **exported}.items():
        llm = open_model(path, 256)
        tokens = llm.tokenize(b"def fibonacci(n):\n    ", add_bos=True, special=True)
        stream = llm.generate(tokens, top_k=1, temp=0)
        texts[name] = llm.detokenize([int(next(stream)) for _ in range(12)]).decode()
        sizes[name] = int(llama_cpp.llama_model_size(llm.model))
        llm.close()
    table = 49152 * 576
    assert sizes["f16"] - sizes["q8"] == table * 2 - table // 32 * 34  # F16 -> Q8_0 blocks
    assert sizes["f16"] - sizes["q4"] == table * 2 - table // 32 * 18  # F16 -> Q4_0 blocks
    assert all(text.strip() for text in texts.values()), texts  # each one generates code


def test_the_gate_scores_exports_and_the_null_control_is_exact(originals, exported, prompts):
    code, report = _regress(
        originals["f16"],
        prompts,
        "-v", f"q8=llamacpp={exported['q8']}",
        "-v", f"q4=llamacpp={exported['q4']}",
        "--null-control",
    )  # fmt: skip
    variants = {v["name"]: v for v in report["variants"]}
    assert variants["null-control"]["summary"]["kl_mean"] == 0.0
    assert variants["null-control"]["passed"]
    q8, q4 = variants["q8"]["summary"], variants["q4"]["summary"]
    assert 0 < q8["kl_mean"] < q4["kl_mean"]  # Q4_0 loses more than Q8_0
    assert code == (0 if all(v["passed"] for v in report["variants"]) else 1)


def test_an_export_passes_the_gate_against_the_gguf_it_was_made_from(
    originals, loaded, exported, prompts
):
    """The shipped GGUF's table is Q8_0 already: INT8 in groups of 32 re-encodes it almost
    exactly, so against the file it came from the export passes the default gate."""
    variant = f"q8=llamacpp={exported['q8-shipped']}"
    result = _gate(loaded["shipped"], originals["shipped"], prompts, variant)
    assert result.passed, result.failures


def test_the_original_can_be_computed_by_transformers(originals, loaded, prompts):
    """llama.cpp on the shipped GGUF against transformers on its dequantized weights: the two
    engines agree closely (llama.cpp quantizes activations in its Q4_1/Q8_0 kernels)."""
    variant = f"served=llamacpp={originals['shipped']}"
    result = _gate(loaded["shipped"], originals["shipped"], prompts, variant, by="transformers")
    summary = result.variants[0].summary
    assert 0 < summary.kl_mean < 0.05 and summary.same_top1 > 0.9


def test_a_variant_of_another_model_or_source_is_refused(originals, loaded, exported, prompts):
    from copilot_cli.core.errors import InputError

    shipped = (loaded["shipped"], originals["shipped"], prompts)
    with pytest.raises(InputError, match="exported from another GGUF"):
        _gate(*shipped, f"q8=llamacpp={exported['q8']}")  # made from the F16-table file
    from copilot_cli import instruments

    vocab = instruments.root() / "vocab" / "ggml-vocab-gpt-2.gguf"
    with pytest.raises(InputError, match="no tensors"):
        _gate(*shipped, f"x=llamacpp={vocab}")


def test_slot_folders_are_scored_from_their_restored_prefixes(originals, loaded, prompts, tmp_path):
    from copilot_cli import CompileOptions, compile_templates

    compile_templates(CompileOptions(REPO / "templates", tmp_path / "bundle"))
    slots = tmp_path / "slots"
    args = ["prefill-kv", str(tmp_path / "bundle"), "--engine", "llama.cpp"]
    made = CliRunner().invoke(app, [*args, "-m", str(originals["shipped"]), "-o", str(slots)])
    assert made.exit_code == 0, made.output
    result = _gate(loaded["shipped"], originals["shipped"], prompts, f"cached=kv={slots}")
    summary = result.variants[0].summary
    assert result.passed and summary.kl_mean < 1e-9 and summary.same_top1 == 1.0


def test_our_kl_matches_llama_perplexity_within_5_percent(originals, exported, tmp_path):
    from copilot_cli import instruments

    tool = instruments.root() / "llama-tools" / "bin" / "llama-perplexity"
    if not tool.is_file():
        pytest.skip("make llama-tools builds llama-perplexity")
    from copilot_cli.regress.llamacpp_engine import chunks_mean_kl

    text = tmp_path / "text.txt"
    sources = sorted((REPO / "sample_data/repo/src/kvstore").glob("*.py"))[:3]
    text.write_text("".join(p.read_text() for p in sources))
    run = [str(tool), "-m", str(originals["f16"]), "-f", str(text), "-c", "256"]
    base = tmp_path / "base.bin"
    subprocess.run([*run, "--kl-divergence-base", str(base)], capture_output=True, check=True)
    run[2] = str(exported["q8"])
    done = subprocess.run(
        [*run, "--kl-divergence-base", str(base), "--kl-divergence"],
        capture_output=True,
        text=True,
        check=True,
    )
    theirs = float(re.search(r"Mean\s+KLD:\s+([0-9.eE+-]+)", done.stdout + done.stderr)[1])
    ours = chunks_mean_kl(originals["f16"], exported["q8"], base)
    assert abs(ours - theirs) <= 0.05 * theirs, (ours, theirs)
    shutil.rmtree(tmp_path / "bundle", ignore_errors=True)
