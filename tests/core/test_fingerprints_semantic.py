"""Fingerprints identify what a model and a tokenizer compute, not how their files are laid
out: re-saving, re-sharding, copying a tokenizer between models or adding unrelated keys keeps
them; one merge, one special token, the chat template, the BOS flag, one weight ulp or one
architecture field changes them, and artifacts are refused naming both fingerprints."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

from copilot_cli.core.errors import ArtifactError, FingerprintMismatch
from copilot_cli.core.fingerprints import (
    model_fingerprint_from_folder,
    model_fingerprint_from_weights,
    tokenizer_fingerprint,
)
from copilot_cli.core.models import SHIPPED_MODEL, ModelSpec, load_model

REPO = Path(__file__).resolve().parents[2]


def _fp(folder: Path) -> str:
    return tokenizer_fingerprint(AutoTokenizer.from_pretrained(folder))


@pytest.fixture(scope="module")
def base_fp() -> str:
    return _fp(SHIPPED_MODEL)


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory) -> Path:
    """A second model (another architecture) that got the shipped tokenizer by save_pretrained:
    the reported case."""
    folder = tmp_path_factory.mktemp("qwen")
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_MODEL)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
    )
    torch.manual_seed(1)
    Qwen2ForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_same_tokenizer_resaved_copied_or_with_extra_keys_has_one_fingerprint(
    tmp_path, base_fp, tiny_llama_dir
):
    resaved = tmp_path / "resaved"
    AutoTokenizer.from_pretrained(SHIPPED_MODEL).save_pretrained(resaved)
    config = json.loads((resaved / "tokenizer_config.json").read_text())
    assert config.get("is_local") is True  # save_pretrained added keys: the reported cause
    assert _fp(resaved) == base_fp
    assert _fp(tiny_llama_dir) == base_fp  # another size of the family, same tokenizer

    extra = shutil.copytree(SHIPPED_MODEL, tmp_path / "extra")
    config = json.loads((extra / "tokenizer_config.json").read_text())
    config.update(model_max_length=123456, name_or_path="elsewhere", note="unrelated")
    (extra / "tokenizer_config.json").write_text(json.dumps(config, indent=4, sort_keys=True))
    spec = json.loads((extra / "tokenizer.json").read_text())
    (extra / "tokenizer.json").write_text(json.dumps(spec, indent=1))  # other key layout
    assert _fp(extra) == base_fp


def test_a_tokenizer_that_another_architecture_loads_differently_is_told_apart(base_fp, qwen_dir):
    """In a Qwen2 folder transformers loads the same files as a Qwen2Tokenizer, which rebuilds
    the normalizer and pre-tokenizer: it really gives other ids, so it must not match."""
    shipped = AutoTokenizer.from_pretrained(SHIPPED_MODEL)
    in_qwen = AutoTokenizer.from_pretrained(qwen_dir)
    text = "def f(x):\n  return 1"
    assert shipped(text).input_ids != in_qwen(text).input_ids
    assert tokenizer_fingerprint(in_qwen) != base_fp


def test_bundle_for_model_a_prefills_on_model_b_with_the_same_tokenizer(tmp_path, tiny_llama_dir):
    from copilot_cli.kv import PrefillOptions, prefill_kv
    from copilot_cli.prompts import CompileOptions, compile_templates

    compile_templates(CompileOptions(REPO / "templates", tmp_path / "bundle"))  # model A's
    loaded = load_model(ModelSpec(str(tiny_llama_dir)))  # model B: other weights and size
    result = prefill_kv(
        PrefillOptions(out=tmp_path / "kv", bundle=tmp_path / "bundle", verify=True), loaded
    )
    assert len(result.prefixes) >= 6 and result.verify and result.failures == []


def _edited_tokenizer(tmp_path: Path, name: str, edit) -> Path:
    folder = shutil.copytree(SHIPPED_MODEL, tmp_path / name)
    edit(folder)
    return folder


def _change_a_merge(folder: Path) -> None:
    spec = json.loads((folder / "tokenizer.json").read_text())
    merges = spec["model"]["merges"]
    merges[10], merges[11] = merges[11], merges[10]  # two merges swap rank
    (folder / "tokenizer.json").write_text(json.dumps(spec))


def _add_a_special_token(folder: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|fim_middle|>"]})
    tokenizer.save_pretrained(folder)


def _change_the_chat_template(folder: Path) -> None:
    path = folder / "chat_template.jinja"
    path.write_text(path.read_text().replace("\\n", "\\n\\n", 1))


def _flip_add_bos(folder: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.add_bos_token = True
    assert tokenizer("x").input_ids[0] == tokenizer.bos_token_id
    tokenizer.save_pretrained(folder)


@pytest.mark.parametrize(
    "edit", [_change_a_merge, _add_a_special_token, _change_the_chat_template, _flip_add_bos]
)
def test_each_change_that_matters_changes_the_fingerprint_and_is_refused(tmp_path, base_fp, edit):
    from copilot_cli.prompts import (
        CompileOptions,
        RenderOptions,
        compile_templates,
        render_template,
    )

    folder = _edited_tokenizer(tmp_path, "changed", edit)
    changed = _fp(folder)
    assert changed != base_fp
    compile_templates(CompileOptions(REPO / "templates", tmp_path / "bundle"))
    options = RenderOptions(
        tmp_path / "bundle",
        "docstring",
        {"code": "def f(): pass"},
        count_tokens=True,
        tokenizer=str(folder),
    )
    with pytest.raises(FingerprintMismatch) as info:
        render_template(options)
    assert base_fp[:16] in str(info.value) and changed[:16] in str(info.value)


def _save(model, folder: Path, **kwargs) -> Path:
    model.save_pretrained(folder, **kwargs)
    return folder


def test_model_resharded_or_resaved_keeps_its_fingerprint(tmp_path):
    model = AutoModelForCausalLM.from_pretrained(SHIPPED_MODEL)
    base = model_fingerprint_from_folder(SHIPPED_MODEL)
    sharded = _save(model, tmp_path / "sharded", max_shard_size="2MB")
    assert len(list(sharded.glob("*.safetensors"))) > 2
    assert model_fingerprint_from_folder(sharded) == base
    assert model_fingerprint_from_folder(_save(model, tmp_path / "resaved")) == base


def test_one_ulp_or_one_architecture_field_changes_the_fingerprint_and_is_refused(tmp_path):
    from copilot_cli.kv import PrefillOptions, load_prefix, prefill_kv

    base = model_fingerprint_from_folder(SHIPPED_MODEL)
    model = AutoModelForCausalLM.from_pretrained(SHIPPED_MODEL)
    with torch.no_grad():
        weight = model.model.layers[0].mlp.up_proj.weight
        weight[0, 0] = torch.nextafter(weight[0, 0], torch.tensor(float("inf")))
    ulp = _save(model, tmp_path / "ulp")
    shutil.copy(SHIPPED_MODEL / "tokenizer.json", ulp)
    shutil.copy(SHIPPED_MODEL / "tokenizer_config.json", ulp)
    assert model_fingerprint_from_folder(ulp) != base

    eps = shutil.copytree(SHIPPED_MODEL, tmp_path / "eps")
    config = json.loads((eps / "config.json").read_text())
    config["rms_norm_eps"] = 1e-5
    (eps / "config.json").write_text(json.dumps(config))
    assert model_fingerprint_from_folder(eps) != base

    text = tmp_path / "prefix.txt"
    text.write_text("You are a careful assistant.\n" * 8)
    prefill_kv(PrefillOptions(out=tmp_path / "kv", texts=(text,)))  # the shipped model's
    for folder in (ulp, eps):
        other = load_model(ModelSpec(str(folder)))
        with pytest.raises(FingerprintMismatch) as info:
            load_prefix(tmp_path / "kv", other.model, "prefix.txt")
        assert base[:16] in str(info.value) and other.model_fingerprint[:16] in str(info.value)


def test_an_in_memory_model_matches_its_saved_folder_when_nothing_is_tied(tiny_llama_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    assert not model.config.tie_word_embeddings
    assert model_fingerprint_from_weights(model) == model_fingerprint_from_folder(tiny_llama_dir)


def test_artifacts_of_the_older_scheme_ask_for_a_rerun(tmp_path):
    from copilot_cli.kv import PrefillOptions, load_prefix, prefill_kv

    text = tmp_path / "prefix.txt"
    text.write_text("You are a careful assistant.\n" * 8)
    prefill_kv(PrefillOptions(out=tmp_path / "kv", texts=(text,)))
    index = json.loads((tmp_path / "kv" / "index.json").read_text())
    del index["fingerprint_scheme"]
    (tmp_path / "kv" / "index.json").write_text(json.dumps(index))
    loaded = load_model(ModelSpec())
    with pytest.raises(ArtifactError, match=r"older fingerprint scheme.*re-run prefill-kv"):
        load_prefix(tmp_path / "kv", loaded.model, "prefix.txt")


def test_a_remembered_tokenizer_fingerprint_is_the_one_computed_and_follows_changes(tmp_path):
    import hashlib

    from copilot_cli.core.fingerprints import (
        FileFactCache,
        canonical,
        tokenizer_description,
        tokenizer_fingerprint,
    )

    def whole(tokenizer) -> str:  # the definition: sha256 of the canonical description
        return hashlib.sha256(canonical(tokenizer_description(tokenizer)).encode()).hexdigest()

    store = FileFactCache("t.json", tmp_path / "t.json")
    cold = AutoTokenizer.from_pretrained(SHIPPED_MODEL)
    first = tokenizer_fingerprint(cold, store)
    assert first == whole(cold) and (tmp_path / "t.json").is_file()
    warm = AutoTokenizer.from_pretrained(SHIPPED_MODEL)
    assert tokenizer_fingerprint(warm, FileFactCache("t.json", tmp_path / "t.json")) == first
    changed = AutoTokenizer.from_pretrained(SHIPPED_MODEL)
    changed.chat_template = "{{ messages[0]['content'] }}"
    again = tokenizer_fingerprint(changed, FileFactCache("t.json", tmp_path / "t.json"))
    assert again == whole(changed) != first
