import os
import shutil

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from copilot_cli.core.fingerprints import (
    FileHashCache,
    model_fingerprint,
    model_fingerprint_from_folder,
    model_fingerprint_from_weights,
    tokenizer_fingerprint,
)


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_model_fingerprint_is_stable_and_tracks_weights(tiny_llama_dir, tmp_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    first = model_fingerprint_from_folder(tiny_llama_dir, model.config)
    assert first == model_fingerprint_from_folder(tiny_llama_dir, model.config)
    assert len(first) == 64

    copy = _copy(tiny_llama_dir, tmp_path / "copy")
    assert model_fingerprint_from_folder(copy, model.config) == first  # content, not path

    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight[0, 0] += 1.0
    model.save_pretrained(copy)
    assert model_fingerprint_from_folder(copy, model.config) != first


def test_config_change_changes_fingerprint(tiny_llama_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    base = model_fingerprint_from_folder(tiny_llama_dir, model.config)
    model.config.rope_parameters = {"rope_type": "default", "rope_theta": 1234.0}
    assert model_fingerprint_from_folder(tiny_llama_dir, model.config) != base


def test_in_memory_model_fingerprint_tracks_weights(tiny_llama_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    base = model_fingerprint_from_weights(model)
    with torch.no_grad():
        model.lm_head.weight[3, 3] += 0.5
    assert model_fingerprint_from_weights(model) != base


def test_loaded_model_uses_its_folder(tiny_llama_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    assert model_fingerprint(model) == model_fingerprint_from_folder(tiny_llama_dir, model.config)


def test_file_hash_cache_rehashes_when_the_file_changes(tmp_path):
    cache = FileHashCache(tmp_path / "cache.json")
    blob = tmp_path / "blob"
    blob.write_bytes(b"one")
    first = cache.sha256(blob)
    assert FileHashCache(tmp_path / "cache.json").sha256(blob) == first  # read back from disk
    blob.write_bytes(b"two")
    os.utime(blob, ns=(1, 1))
    assert cache.sha256(blob) != first


def test_file_hash_cache_is_used_for_unchanged_files(tmp_path):
    cache = FileHashCache(tmp_path / "cache.json")
    blob = tmp_path / "blob"
    blob.write_bytes(b"content")
    cache.sha256(blob)
    # Same size and mtime: the cached value is trusted, so a poisoned entry shows through.
    entries = cache._load()
    entries[str(blob.resolve())]["sha256"] = "cached"
    assert cache.sha256(blob) == "cached"


def test_tokenizer_fingerprint_tracks_files_and_special_tokens(tiny_llama_dir, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama_dir)
    base = tokenizer_fingerprint(tokenizer)
    assert base == tokenizer_fingerprint(AutoTokenizer.from_pretrained(tiny_llama_dir))

    changed = _copy(tiny_llama_dir, tmp_path / "tok")
    other = AutoTokenizer.from_pretrained(changed)
    other.add_special_tokens({"additional_special_tokens": ["<|fim|>"]})
    other.save_pretrained(changed)
    assert tokenizer_fingerprint(AutoTokenizer.from_pretrained(changed)) != base
