"""SmolLM2-135M: a GGUF file is a model wherever a model folder is (model-info,
compile-templates, prefill-kv --verify), with the fingerprint of what it computes; a damaged
or foreign file is one line, exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from copilot_cli.cli import app

pytestmark = pytest.mark.real
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def runner():
    return CliRunner()


def _json(runner, args):
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_gguf_file_and_its_converted_folder_are_one_model(runner, smollm2_gguf, smollm2_dir):
    from_file = _json(runner, ["model-info", "--model", str(smollm2_gguf)])
    from_folder = _json(runner, ["model-info", "--model", str(smollm2_dir)])
    for key in ("model_fingerprint", "tokenizer_fingerprint", "layers", "kv_heads", "vocab_size"):
        assert from_file[key] == from_folder[key], key
    assert from_file["layers"] == 30 and from_file["tied_embeddings"] is True


def test_a_folder_holding_the_gguf_is_a_model_too(runner, smollm2_gguf, tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / smollm2_gguf.name).symlink_to(smollm2_gguf)
    assert _json(runner, ["model-info", "--model", str(folder)])["layers"] == 30


def test_compile_templates_and_prefill_kv_verify_with_the_gguf(runner, smollm2_gguf, tmp_path):
    bundle, kv = tmp_path / "bundle", tmp_path / "kv"
    result = runner.invoke(
        app,
        ["compile-templates", str(REPO / "templates"), "-o", str(bundle)]
        + ["--tokenizer", str(smollm2_gguf)],
    )
    assert result.exit_code == 0, result.output
    report = _json(
        runner, ["prefill-kv", str(bundle), "-o", str(kv), "--model", str(smollm2_gguf), "--verify"]
    )
    assert report["verify"] and all(v["passed"] for v in report["verify"]), report["verify"]
    inspected = runner.invoke(app, ["inspect", str(kv), "--model", str(smollm2_gguf)])
    assert inspected.exit_code == 0, inspected.output


@pytest.mark.parametrize("damage", ["truncated", "not-gguf", "empty"])
def test_a_damaged_gguf_is_one_line_exit_2(runner, smollm2_gguf, tmp_path, damage):
    bad = tmp_path / "model.gguf"
    if damage == "truncated":
        with smollm2_gguf.open("rb") as source:
            bad.write_bytes(source.read(smollm2_gguf.stat().st_size // 2))
    elif damage == "not-gguf":
        bad.write_bytes(b"PK\x03\x04" + b"\0" * 4096)
    else:
        bad.touch()
    result = runner.invoke(app, ["model-info", "--model", str(bad)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and "Traceback" not in result.output


def test_the_real_model_writes_code(smollm2):
    ids = smollm2.tokenizer("def fibonacci(n):", return_tensors="pt").input_ids
    out = smollm2.model.generate(ids, max_new_tokens=24, do_sample=False)
    text = smollm2.tokenizer.decode(out[0][ids.shape[1] :])
    assert "return" in text and "fibonacci(" in text, text


def test_a_copy_of_the_folder_keeps_its_fingerprint(smollm2_dir, smollm2, tmp_path):
    from copilot_cli.core.models import ModelSpec, load_model

    copy = Path(shutil.copytree(smollm2_dir, tmp_path / "copy"))
    assert load_model(ModelSpec(str(copy))).model_fingerprint == smollm2.model_fingerprint
