"""quantize on the shipped model: quality goals, memory, apply, format and bad input."""

import hashlib
import json

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from copilot_cli.cli import app
from copilot_cli.core.errors import FingerprintMismatch, InputError
from copilot_cli.core.models import ModelSpec, load_model
from copilot_cli.quant import QuantizeOptions, apply_quantized_embeddings, quantize_embeddings
from copilot_cli.quant.format import FILENAME, read
from copilot_cli.quant.module import QuantizedEmbedding, QuantizedLMHead


@pytest.fixture(scope="module")
def int8(tmp_path_factory):
    loaded = load_model(ModelSpec())
    out = tmp_path_factory.mktemp("int8")
    result = quantize_embeddings(QuantizeOptions(out=out, bits=8), loaded)
    return loaded, out, result


def test_int8_meets_the_quality_and_memory_goals(int8):
    _, _, result = int8
    report = result.report
    assert report.logit_fidelity.mean_kl <= 1e-3
    assert report.rows.cosine_min >= 0.999
    assert report.memory.ratio_vs_fp16 <= 0.52
    assert len(report.rows.worst_rows) == 10


def test_int4_with_5_percent_fp16_rows_reports_and_meets_its_goal(tmp_path):
    loaded = load_model(ModelSpec())
    keep = int(0.05 * loaded.config.vocab_size)
    result = quantize_embeddings(
        QuantizeOptions(out=tmp_path, bits=4, group_size=32, keep_fp16=keep), loaded
    )
    report = result.report
    assert report.scheme == "int4-group32"
    assert report.logit_fidelity.mean_kl <= 1e-2
    assert report.memory.bits_per_weight < 6
    assert report.corpus.fp16_token_share > 0.5


def test_kept_rows_are_bit_identical_to_fp16_originals(int8):
    loaded, out, _ = int8
    tables, _ = read(out / FILENAME)
    embed = tables["embed"]
    original = loaded.model.get_input_embeddings().weight.detach()
    assert torch.equal(embed.kept_rows, original[embed.kept_ids].to(torch.float16))
    special = set(loaded.tokenizer.all_special_ids)
    assert special <= set(embed.kept_ids.tolist())  # BOS/EOS/PAD always kept


def test_applied_module_serves_the_stored_scheme_and_generates(int8):
    _, out, _ = int8
    model = load_model(ModelSpec())
    original = model.model.get_input_embeddings().weight.detach().clone()
    apply_quantized_embeddings(model.model, out, tokenizer=model.tokenizer)
    module = model.model.get_input_embeddings()
    assert isinstance(module, QuantizedEmbedding)
    tables, _ = read(out / FILENAME)
    q, scales = tables["embed"].table.q, tables["embed"].table.scales
    ids = torch.arange(0, 200)
    served = module(ids)
    kept = set(tables["embed"].kept_ids.tolist())
    for i in ids.tolist():
        expected = original[i].half().float() if i in kept else q[i].float() * scales[i].float()
        assert torch.equal(served[i], expected)
    # the float table is gone from the input side: the module holds about half of fp16
    assert module.nbytes() < 0.55 * original.numel() * 2
    prompt = model.tokenizer("def add(a, b):\n", return_tensors="pt").input_ids
    out_ids = model.model.generate(
        prompt, max_new_tokens=5, do_sample=False, pad_token_id=model.tokenizer.pad_token_id
    )
    assert out_ids.shape[1] == prompt.shape[1] + 5


def test_tied_head_is_quantized_once(tmp_path):
    loaded = load_model(ModelSpec())
    result = quantize_embeddings(
        QuantizeOptions(out=tmp_path, include_lm_head=True, prompts=None), loaded
    )
    assert any("tied" in w for w in result.warnings)
    tables, metadata = read(tmp_path / FILENAME)
    assert metadata["lm_head"] == "tied" and set(tables) == {"embed"}
    apply_quantized_embeddings(loaded.model, tmp_path)
    head = loaded.model.get_output_embeddings()
    assert isinstance(head, QuantizedLMHead)
    assert head.embedding is loaded.model.get_input_embeddings()
    logits = loaded.model(torch.tensor([[5, 6, 7]])).logits
    assert logits.shape[-1] == loaded.config.vocab_size and torch.isfinite(logits).all()


def test_untied_head_is_quantized_separately(tmp_path, tiny_llama_dir):
    config = LlamaConfig.from_pretrained(tiny_llama_dir)
    config.tie_word_embeddings = False
    torch.manual_seed(1)
    folder = tmp_path / "untied"
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    import shutil

    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (tiny_llama_dir / name).exists():
            shutil.copy(tiny_llama_dir / name, folder / name)
    loaded = load_model(ModelSpec(str(folder)))
    quantize_embeddings(
        QuantizeOptions(out=tmp_path / "q", include_lm_head=True, prompts=None), loaded
    )
    tables, metadata = read(tmp_path / "q" / FILENAME)
    assert metadata["lm_head"] == "separate" and set(tables) == {"embed", "lm_head"}


def test_output_is_deterministic(tmp_path):
    loaded = load_model(ModelSpec())
    digests = []
    for name in ("a", "b"):
        quantize_embeddings(QuantizeOptions(out=tmp_path / name, bits=4, keep_fp16=100), loaded)
        digests.append(
            [
                hashlib.sha256((tmp_path / name / f).read_bytes()).hexdigest()
                for f in (FILENAME, "report.json")
            ]
        )
    assert digests[0] == digests[1]


def test_applying_to_another_model_is_refused(int8, tiny_llama_dir):
    _, out, _ = int8
    other = load_model(ModelSpec(str(tiny_llama_dir)))
    with pytest.raises(FingerprintMismatch):
        apply_quantized_embeddings(other.model, out)


def test_nan_rows_exit_2_naming_ids(tmp_path, tiny_llama_dir, runner):
    import shutil

    folder = shutil.copytree(tiny_llama_dir, tmp_path / "nan")
    model = AutoModelForCausalLM.from_pretrained(folder)
    with torch.no_grad():
        model.get_input_embeddings().weight[17, 3] = float("nan")
    model.save_pretrained(folder)
    result = runner.invoke(app, ["quantize", "--model", str(folder), "-o", str(tmp_path / "o")])
    assert result.exit_code == 2 and "token ids 17" in result.stderr
    assert not (tmp_path / "o" / FILENAME).exists()


def test_keep_more_rows_than_the_vocabulary_is_clamped(tmp_path):
    loaded = load_model(ModelSpec())
    result = quantize_embeddings(
        QuantizeOptions(out=tmp_path, keep_fp16=10**6, prompts=None), loaded
    )
    assert any("clamped" in w for w in result.warnings)
    assert result.report.kept_rows == loaded.config.vocab_size


def test_bad_options(tmp_path):
    # library errors name the option; the CLI maps it to its flag (test_cli_json_and_bad_bits)
    with pytest.raises(InputError, match=r"^bits:"):
        QuantizeOptions(out=tmp_path, bits=3)
    with pytest.raises(InputError, match="not both"):
        QuantizeOptions(out=tmp_path, keep_fp16=5, keep_coverage=0.5)
    with pytest.raises(InputError, match=r"^corpus: .*does not exist"):
        QuantizeOptions(out=tmp_path, corpus=(tmp_path / "nope",))


@pytest.mark.parametrize(
    ("files", "skipped"),
    [
        ({"empty.txt": b""}, None),
        ({}, None),
        ({"garbage.bin": bytes(range(1, 256)) * 40}, "undecodable"),
        ({"image.png": b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"}, "binary"),
    ],
)
def test_a_corpus_with_no_usable_text_is_refused_saying_what_was_skipped(
    runner, tmp_path, files, skipped
):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, data in files.items():
        (corpus / name).write_bytes(data)
    args = ["quantize", "-o", str(tmp_path / "q"), "--corpus", str(corpus), "--no-fidelity"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "--corpus" in result.stderr and "no usable text" in result.stderr
    if skipped:
        assert f"{skipped} file(s) skipped" in result.stderr
    assert not (tmp_path / "q").exists()


def test_text_in_another_encoding_is_counted_with_a_warning(runner, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "latin1.py").write_bytes("# café, naïve, déjà vu\nx = 1\n".encode("latin-1") * 20)
    (corpus / "blob.bin").write_bytes(b"\0" * 64)
    args = ["quantize", "-o", str(tmp_path / "q"), "--corpus", str(corpus), "--no-fidelity"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    assert "1 binary file(s) skipped" in result.stderr
    assert "not UTF-8" in result.stderr and "latin1.py" in result.stderr
    assert json.loads(result.stdout)["corpus"]["files"] == 1


def test_cli_json_and_bad_bits(runner, tmp_path):
    result = runner.invoke(
        app, ["quantize", "-o", str(tmp_path / "q"), "--keep-coverage", "0.5", "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["keep_policy"] == {"keep_coverage": 0.5}
    assert report["corpus"]["fp16_token_share"] >= 0.5
    result = runner.invoke(app, ["quantize", "-o", str(tmp_path / "q3"), "--bits", "3"])
    assert result.exit_code == 2 and "8, 4" in result.stderr
    result = runner.invoke(
        app, ["quantize", "-o", str(tmp_path / "q4"), "--corpus", str(tmp_path / "missing")]
    )
    assert result.exit_code == 2 and "missing" in result.stderr


def test_a_corpus_file_named_directly_must_be_utf8(runner, tmp_path):
    corpus = tmp_path / "latin1.py"
    corpus.write_bytes("# café\nx = 1\n".encode("latin-1") * 20)
    args = ["quantize", "-o", str(tmp_path / "q"), "--corpus", str(corpus), "--no-fidelity"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert f"{corpus}: not UTF-8 text: byte 5 (0xe9)" in result.stderr
    assert not (tmp_path / "q").exists()


def test_worst_rows_name_rows_past_the_tokenizer_as_no_token():
    from copilot_cli.core.models import SHIPPED_MODEL, load_tokenizer
    from copilot_cli.quant.quantizer import _token_text

    tokenizer = load_tokenizer(SHIPPED_MODEL)
    assert _token_text(tokenizer, len(tokenizer) + 5) == "<no token>"
    assert _token_text(tokenizer, 5) == tokenizer.convert_ids_to_tokens(5)


@torch.no_grad()
def test_fidelity_logits_come_a_block_at_a_time_and_match_the_models_own():
    from copilot_cli.quant.report import logit_blocks

    loaded = load_model(ModelSpec())
    ids = torch.tensor([list(range(5, 205))])
    full = loaded.model(ids).logits[0]
    blocks = logit_blocks(loaded.model, ids)
    assert blocks.whole is None  # no prompt-long logits held
    got = torch.cat([blocks(s, min(s + 64, 200)) for s in range(0, 200, 64)])
    # the same head on fewer rows: equal up to the matrix product's rounding
    torch.testing.assert_close(got, full, rtol=1e-5, atol=1e-5)


@torch.no_grad()
def test_fidelity_uses_the_whole_logits_when_the_model_post_processes_them():
    from transformers import Gemma2Config, Gemma2ForCausalLM

    from copilot_cli.quant.report import logit_blocks

    torch.manual_seed(0)
    config = Gemma2Config(
        vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, final_logit_softcapping=0.5,
    )  # fmt: skip
    model = Gemma2ForCausalLM(config).eval()
    ids = torch.tensor([list(range(3, 40))])
    blocks = logit_blocks(model, ids)
    assert blocks.whole is not None  # the soft cap is not in the head
    assert torch.equal(blocks(0, 37), model(ids).logits[0])
