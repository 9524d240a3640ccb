import shutil

import pytest
from transformers import BertConfig, BertModel

from copilot_cli.core.errors import InputError, ModelLoadError
from copilot_cli.core.models import ModelSpec, context_length, load_model


def test_loads_model_and_tokenizer_with_fingerprints(tiny_llama_dir):
    loaded = load_model(ModelSpec(str(tiny_llama_dir)))
    assert loaded.model.training is False
    assert len(loaded.model_fingerprint) == 64 and len(loaded.tokenizer_fingerprint) == 64
    assert context_length(loaded.config) == 512
    ids = loaded.tokenizer("def f(x):\n    return x\n", return_tensors="pt").input_ids
    assert loaded.model(ids).logits.shape[-1] == loaded.config.vocab_size


def test_dtype_option_is_applied(tiny_llama_dir):
    loaded = load_model(ModelSpec(str(tiny_llama_dir), dtype="bfloat16"))
    assert next(loaded.model.parameters()).dtype.__str__() == "torch.bfloat16"


def test_missing_folder_names_the_path(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist") as info:
        load_model(ModelSpec(str(tmp_path / "nope")))
    assert str(tmp_path / "nope") in str(info.value)


def test_folder_without_a_model(tmp_path):
    with pytest.raises(ModelLoadError, match=r"no config\.json"):
        load_model(ModelSpec(str(tmp_path)))


def test_uncached_hub_id_is_refused_offline():
    with pytest.raises(ModelLoadError, match="--allow-download"):
        load_model(ModelSpec("no-such-org/no-such-model-xyz"))


def test_non_causal_model_is_refused(tmp_path):
    BertModel(
        BertConfig(
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=37,
            vocab_size=99,
        )
    ).save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="BertModel is not a causal language model"):
        load_model(ModelSpec(str(tmp_path)))


def test_unknown_model_type_is_refused(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "t5"}')
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelLoadError, match="'t5' is not a causal language model"):
        load_model(ModelSpec(str(tmp_path)))


def test_truncated_weights_are_refused(tiny_llama_dir, tmp_path):
    broken = shutil.copytree(tiny_llama_dir, tmp_path / "broken")
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ModelLoadError, match="truncated") as info:
        load_model(ModelSpec(str(broken)))
    assert "model.safetensors" in str(info.value)


def test_config_without_weights(tiny_llama_dir, tmp_path):
    broken = shutil.copytree(tiny_llama_dir, tmp_path / "noweights")
    (broken / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="no weight files"):
        load_model(ModelSpec(str(broken)))


def test_bad_dtype_and_device_are_input_errors(runner):
    # the library names the option; the CLI names the flag
    with pytest.raises(InputError, match=r"^dtype:"):
        ModelSpec("x", dtype="float8")
    with pytest.raises(InputError, match=r"^device:"):
        ModelSpec("x", device="tpu:0")
    from copilot_cli.cli import app

    result = runner.invoke(app, ["model-info", "--dtype", "float8"])
    assert result.exit_code == 2 and "--dtype" in result.stderr
    result = runner.invoke(app, ["model-info", "--device", "tpu:0"])
    assert result.exit_code == 2 and "--device" in result.stderr


def test_every_command_that_takes_a_model_takes_dtype_and_device(runner):
    """docs/cli.md's promise, checked on the CLI itself (quantize and prune lacked --dtype)."""
    import typer

    from copilot_cli.cli import app

    group = typer.main.get_command(app)
    runs_a_model = []
    for name, command in group.commands.items():
        if name == "inspect":  # loads a model only to compare fingerprints: no dtype to run in
            continue
        flags = {opt for param in command.params for opt in getattr(param, "opts", ())}
        if "--model" in flags and "--device" in flags:
            runs_a_model.append(name)
            assert "--dtype" in flags, name
    assert {"quantize", "prune", "prefill-kv", "regress"} <= set(runs_a_model)
    result = runner.invoke(app, ["quantize", "--dtype", "float8"])
    assert result.exit_code == 2 and "--dtype" in result.stderr
