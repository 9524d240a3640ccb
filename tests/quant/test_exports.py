"""quantize --export: the table in the formats engines load. GGUF files are read back by the
`gguf` package (its own Q8_0/Q4_0 dequantization), compressed-tensors checkpoints by
transformers with the `compressed-tensors` package; both must hold exactly our table."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter
from gguf.quants import dequantize

from copilot_cli.core.errors import InputError
from copilot_cli.quant import gguf_export
from copilot_cli.quant.scheme import dequantize_all, quantize

ROWS, COLS = 96, 64


def _source(path: Path, *, embedding: bool = True, extra_embd: bool = False, tied=True) -> Path:
    """A small GGUF of llama's shape: metadata of several types, an F16 embedding table and
    tensors of other types around it."""
    writer = GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_context_length(128)
    writer.add_string("general.name", "tiny")
    writer.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(ROWS)])
    writer.add_float32("llama.rope.freq_base", 10000.0)
    rng = np.random.default_rng(0)
    writer.add_tensor("blk.0.attn_norm.weight", rng.standard_normal(COLS).astype(np.float32))
    if embedding:
        table = rng.standard_normal((ROWS, COLS)).astype(np.float16)
        writer.add_tensor(gguf_export.EMBEDDING, table)
    if extra_embd:
        writer.add_tensor("per_layer_token_embd.weight", np.zeros((ROWS, 32), np.float16))
    raw = rng.integers(0, 255, (COLS, 34 * 2), dtype=np.uint8)  # Q8_0 blocks of [64, 64]
    writer.add_tensor(
        "blk.0.ffn_up.weight", raw, raw_shape=(COLS, 34 * 2), raw_dtype=GGMLQuantizationType.Q8_0
    )
    if not tied:
        writer.add_tensor("output.weight", rng.standard_normal((ROWS, COLS)).astype(np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _table(source: Path) -> torch.Tensor:
    reader = GGUFReader(str(source))
    tensor = next(t for t in reader.tensors if t.name == gguf_export.EMBEDDING)
    return torch.from_numpy(np.array(tensor.data, dtype=np.float32))


@pytest.mark.parametrize(("bits", "grouped"), [(8, False), (8, True), (4, True)])
def test_the_gguf_export_holds_our_table_and_the_rest_byte_for_byte(tmp_path, bits, grouped):
    source = _source(tmp_path / "src.gguf")
    weight = _table(source)
    table = quantize(weight, bits, 32, int8_groups=grouped)
    kept = torch.tensor([0, 5, 17])
    encoded = gguf_export.encode(table, kept, weight[kept].half())
    opened = gguf_export.open_source(source, ROWS, COLS)
    keys = {"copilot-opt.scheme": "x", "copilot-opt.kept_rows": 3}
    out = tmp_path / "out.gguf"
    written = gguf_export.write_export(opened, out, {gguf_export.EMBEDDING: encoded}, keys)
    before, after = GGUFReader(str(source)), GGUFReader(str(out))
    assert [t.name for t in after.tensors] == [t.name for t in before.tensors]
    for old, new in zip(before.tensors, after.tensors, strict=True):
        if old.name != gguf_export.EMBEDDING:  # every other tensor: its bytes as they were
            assert new.tensor_type == old.tensor_type and bytes(new.data) == bytes(old.data)
    for name, field in before.fields.items():
        if not name.startswith("GGUF."):
            assert after.fields[name].contents() == field.contents(), name
    assert after.fields["copilot-opt.kept_rows"].contents() == 3
    embd = next(t for t in after.tensors if t.name == gguf_export.EMBEDDING)
    expected = GGMLQuantizationType.Q8_0 if bits == 8 else GGMLQuantizationType.Q4_0
    assert embd.tensor_type == expected
    assert hashlib.sha256(bytes(embd.data)).hexdigest() == written["sha256"][gguf_export.EMBEDDING]
    theirs = torch.from_numpy(dequantize(embd.data, expected).astype(np.float32))
    ours = dequantize_all(table)
    others = torch.ones(ROWS, dtype=torch.bool)
    others[kept] = False
    assert torch.equal(theirs[others], ours[others])  # llama.cpp's dequantization is ours
    step = weight[kept].abs().amax() / (127 if bits == 8 else 7)
    assert (theirs[kept] - weight[kept]).abs().max() <= step  # kept rows: per-block scales
    info = written["tensors"][gguf_export.EMBEDDING]
    assert info["type_before"] == "F16" and info["bytes_before"] == ROWS * COLS * 2
    assert info["bytes_after"] == ROWS * COLS // 32 * (34 if bits == 8 else 18)


def test_an_export_with_nothing_replaced_is_the_source_byte_for_byte(tmp_path):
    source = _source(tmp_path / "src.gguf", tied=False)
    out = tmp_path / "same.gguf"
    gguf_export.write_export(gguf_export.open_source(source, ROWS, COLS), out, {}, {})
    assert out.read_bytes() == source.read_bytes()


@pytest.mark.parametrize(
    ("kwargs", "shape", "message"),
    [
        ({"embedding": False}, (ROWS, COLS), "no embedding tensor"),
        ({"extra_embd": True}, (ROWS, COLS), "not one plain table"),
        ({}, (ROWS + 1, COLS), "vocabulary does not match"),
    ],
)
def test_sources_that_cannot_take_the_export_are_refused(tmp_path, kwargs, shape, message):
    source = _source(tmp_path / "src.gguf", **kwargs)
    with pytest.raises(InputError, match=message):
        gguf_export.open_source(source, *shape)


def test_an_exported_gguf_is_not_exported_again(tmp_path):
    source = _source(tmp_path / "src.gguf")
    out = tmp_path / "out.gguf"
    keys = {"copilot-opt.scheme": "int8-per-row"}
    gguf_export.write_export(gguf_export.open_source(source, ROWS, COLS), out, {}, keys)
    with pytest.raises(InputError, match="already"):
        gguf_export.open_source(out, ROWS, COLS)


@pytest.mark.parametrize("bits", [8, 4])
def test_q8_0_and_q4_0_take_groups_of_32_only(bits):
    table = quantize(torch.randn(ROWS, COLS), bits, 64, int8_groups=True)
    with pytest.raises(InputError, match="groups of 32"):
        gguf_export.encode(table, torch.tensor([], dtype=torch.int64), torch.empty(0, COLS))


# -- compressed-tensors --------------------------------------------------------------------


@pytest.fixture(scope="module")
def shipped():
    from copilot_cli.core.models import ModelSpec, load_model

    return load_model(ModelSpec())


@pytest.mark.filterwarnings("ignore:You passed `quantization_config`")
@pytest.mark.parametrize(
    ("bits", "scales", "head"),
    [(8, "row", False), (8, "group", False), (4, "row", False), (8, "row", True)],
)
def test_the_compressed_tensors_export_loads_as_our_table(shipped, tmp_path, bits, scales, head):
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig

    from copilot_cli.quant import QuantizeOptions, quantize_embeddings
    from copilot_cli.quant.apply import load_quantized, swapped_embeddings

    out = tmp_path / "q"
    options = QuantizeOptions(
        out=out,
        bits=bits,
        int8_scales=scales,
        include_lm_head=head,
        prompts=None,
        export=("compressed-tensors",),
    )
    result = quantize_embeddings(options, shipped)
    folder = out / "compressed-tensors"
    config = json.loads((folder / "config.json").read_text())
    quant = config["quantization_config"]
    assert quant["quant_method"] == "compressed-tensors" and not config["tie_word_embeddings"]
    assert quant["format"] == "pack-quantized"  # what vLLM's embedding method reads
    loaded = AutoModelForCausalLM.from_pretrained(
        folder, quantization_config=CompressedTensorsConfig(dequantize=True)
    ).eval()
    module, head_module = load_quantized(shipped.model, out, tokenizer=shipped.tokenizer)
    ids = torch.arange(shipped.model.get_input_embeddings().weight.shape[0])[None]
    differ = (module(ids)[0] != loaded.get_input_embeddings()(ids)[0]).any(dim=1)
    kept = int(result.report.kept_rows)
    assert kept > 0 and int(differ.sum()) == kept  # every row but the FP16 ones, bit for bit
    text = shipped.tokenizer("def add(a, b):\n    return a + b\n", return_tensors="pt")
    with torch.no_grad(), swapped_embeddings(shipped.model, module, head_module):
        ours = shipped.model(**text).logits
    with torch.no_grad():
        theirs = loaded(**text).logits
    assert not set(text.input_ids[0].tolist()) & set(torch.nonzero(differ).flatten().tolist())
    if head:  # the head's FP16 rows are the logits of those tokens: every other one is equal
        assert torch.equal(ours[..., ~differ], theirs[..., ~differ])
        assert (ours[..., differ] - theirs[..., differ]).abs().max() < 0.1
    else:
        assert torch.equal(ours, theirs)
    [export] = result.report.exports
    assert export.format == "compressed-tensors" and export.kept_rows == kept
    assert export.output == ("quantized" if head else "full precision")


def test_export_options_are_refused_before_any_work(runner, tmp_path):
    from copilot_cli.cli import app

    out = tmp_path / "q"
    not_gguf = tmp_path / "x.gguf"
    not_gguf.write_text("no")
    cases = [
        (["--export", "gguf"], "--export"),
        (["--export", "onnx"], "--export"),
        (["--export", "gguf", "--bits", "4", "--group-size", "64"], "--group-size"),
        (["--gguf", str(not_gguf)], "--gguf"),
        (["--export", "gguf", "--gguf", str(tmp_path / "missing.gguf")], "--gguf"),
    ]
    for args, where in cases:
        result = runner.invoke(app, ["quantize", "-o", str(out), "--no-fidelity", *args])
        assert result.exit_code == 2, (args, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and where in lines[0], (args, result.stderr)
        assert not out.exists()


def _sealed_export(tmp_path: Path) -> Path:
    source = _source(tmp_path / "src.gguf")
    weight = _table(source)
    table = quantize(weight, 8, 32, int8_groups=True)
    encoded = gguf_export.encode(table, torch.tensor([], dtype=torch.int64), torch.empty(0, COLS))
    metadata = {
        "scheme": "int8-group32",
        "kept_rows": 0,
        "model_fingerprint": "m" * 64,
        "tokenizer_fingerprint": "t" * 64,
    }
    keys = gguf_export.export_keys(metadata, "s" * 64, source.name)
    out = tmp_path / "model.gguf"
    opened = gguf_export.open_source(source, ROWS, COLS)
    gguf_export.write_export(opened, out, {gguf_export.EMBEDDING: encoded}, keys)
    return out


def test_inspect_verifies_a_gguf_export_and_refuses_a_replaced_table(runner, tmp_path):
    from copilot_cli.cli import app

    out = _sealed_export(tmp_path)
    result = runner.invoke(app, ["inspect", str(out), "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["kind"] == "gguf-export" and info["scheme"] == "int8-group32"
    assert info["tensors"][gguf_export.EMBEDDING]["type_before"] == "F16"
    assert info["tensors"][gguf_export.EMBEDDING]["type_after"] == "Q8_0"
    reader = GGUFReader(str(out))
    start = int(next(t for t in reader.tensors if t.name == gguf_export.EMBEDDING).data_offset)
    data = bytearray(out.read_bytes())
    data[start + 40] ^= 1  # one value of the table
    out.write_bytes(bytes(data))
    result = runner.invoke(app, ["inspect", str(out)])
    assert result.exit_code == 1 and "not the table quantize --export wrote" in result.stderr
    plain = runner.invoke(app, ["inspect", str(tmp_path / "src.gguf")])
    assert plain.exit_code == 2 and "did not write" in plain.stderr


def test_inspect_names_a_damaged_compressed_tensors_export(shipped, runner, tmp_path):
    from copilot_cli.cli import app
    from copilot_cli.quant import QuantizeOptions, quantize_embeddings

    out = tmp_path / "q"
    quantize_embeddings(
        QuantizeOptions(out=out, prompts=None, export=("compressed-tensors",)), shipped
    )
    assert runner.invoke(app, ["inspect", str(out)]).exit_code == 0
    weights = out / "compressed-tensors" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 1
    weights.write_bytes(bytes(data))
    result = runner.invoke(app, ["inspect", str(out)])
    assert result.exit_code == 1 and "compressed-tensors" in result.stderr, result.output
