"""The shipped tiny code model is a real, small, offline model (not random weights)."""

import json
import math

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


@pytest.fixture(scope="module")
def model_and_tokenizer(shipped_model_dir):
    model = AutoModelForCausalLM.from_pretrained(shipped_model_dir, local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(shipped_model_dir, local_files_only=True)
    return model, tokenizer


def test_loads_through_auto_classes_with_the_promised_shape(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    config = model.config
    assert config.model_type == "llama"
    assert config.num_key_value_heads < config.num_attention_heads  # grouped-query attention
    assert config.num_hidden_layers >= 4
    assert config.max_position_embeddings >= 1024
    assert 4000 <= len(tokenizer) <= 16384
    for token in (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token):
        assert token is not None and token in tokenizer.get_vocab()


def test_weights_fit_the_size_budget(shipped_model_dir):
    assert (shipped_model_dir / "model.safetensors").stat().st_size <= 20_000_000


def test_tokenizer_is_byte_level_and_lossless(model_and_tokenizer):
    _, tokenizer = model_and_tokenizer
    text = "def f(x):\n\treturn x ** 2  # ünïcödé ✓\n"
    ids = tokenizer(text, add_special_tokens=False).input_ids
    assert tokenizer.decode(ids) == text


def _cross_entropy(model, ids: torch.Tensor, window: int = 512) -> float:
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(ids) - 1, window):
            chunk = ids[start : start + window + 1]
            if len(chunk) < 2:
                break
            logits = model(chunk[:-1].unsqueeze(0)).logits[0]
            total += torch.nn.functional.cross_entropy(logits, chunk[1:], reduction="sum").item()
            count += len(chunk) - 1
    return total / count


def test_held_out_perplexity_is_8x_below_unigram(model_and_tokenizer, shipped_model_dir):
    model, tokenizer = model_and_tokenizer
    training = shipped_model_dir / "training"
    sample = (training / "heldout_sample.txt").read_text(encoding="utf-8")
    ids = torch.tensor(tokenizer(sample, add_special_tokens=False).input_ids)
    assert len(ids) > 1000

    counts = torch.tensor(json.loads((training / "unigram_counts.json").read_text()))
    unigram = (counts.double() + 1) / (counts.sum() + len(counts))  # add-one, as in training
    unigram_ce = float(-unigram[ids[1:]].log().mean())
    model_ce = _cross_entropy(model, ids)
    ratio = math.exp(unigram_ce - model_ce)
    assert ratio >= 8, f"perplexity {math.exp(model_ce):.1f} vs unigram {math.exp(unigram_ce):.1f}"


def test_random_weights_would_fail_the_bound(model_and_tokenizer, shipped_model_dir):
    """The bound above is meaningful: an untrained model of the same shape is far off it."""
    model, tokenizer = model_and_tokenizer
    torch.manual_seed(0)
    random_model = type(model)(model.config).eval()
    sample = (shipped_model_dir / "training" / "heldout_sample.txt").read_text(encoding="utf-8")
    ids = torch.tensor(tokenizer(sample, add_special_tokens=False).input_ids[:600])
    assert math.exp(_cross_entropy(random_model, ids)) > 8 * math.exp(_cross_entropy(model, ids))


def test_greedy_generation_writes_python(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    ids = tokenizer("def add(a, b):\n    return", return_tensors="pt").input_ids
    out = model.generate(
        ids, max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.pad_token_id
    )
    text = tokenizer.decode(out[0, ids.shape[1] :])
    assert text.strip(), "the model generated nothing"
