"""A gate that cannot be switched off by accident: every threshold finite and in its range,
from flags, regress.yaml and copilot-opt.yaml alike; a NaN measurement fails."""

import json
import math

import pytest
import yaml

from copilot_cli.cli import app
from copilot_cli.core.errors import InputError
from copilot_cli.core.metrics import Summary
from copilot_cli.regress.gate import Thresholds, verdict

BAD = [
    ("max_mean_kl", math.nan),
    ("max_mean_kl", math.inf),
    ("max_mean_kl", -1e-3),
    ("max_mean_kl", 0.0),
    ("min_same_top1", math.nan),
    ("min_same_top1", 1.5),
    ("min_same_top1", -0.1),
    ("max_prompt_kl", math.nan),
    ("max_prompt_kl", -1.0),
    ("min_exact_match", 1.2),
    ("min_exact_match", math.nan),
    ("min_bleu", -0.5),
    ("min_bleu", math.inf),
]


@pytest.mark.parametrize(("field", "value"), BAD)
def test_every_bad_threshold_is_refused_by_name(field, value):
    with pytest.raises(InputError) as info:
        Thresholds(**{field: value})
    assert info.value.where == field


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--max-mean-kl", "nan"),
        ("--min-same-top1", "NaN"),
        ("--max-prompt-kl", "-1"),
        ("--min-same-top1", "1.5"),
        ("--max-mean-kl", "inf"),
    ],
)
def test_cli_flags_exit_2_naming_the_flag(runner, flag, value):
    result = runner.invoke(app, ["regress", "-v", "x=kv-dtype=int8", flag, value])
    assert result.exit_code == 2, result.output
    assert flag in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize(("field", "value"), BAD)
def test_regress_yaml_exits_2_naming_the_key(runner, tmp_path, field, value):
    config = tmp_path / "regress.yaml"
    config.write_text(
        yaml.safe_dump({"variants": ["x=kv-dtype=int8"], "thresholds": {field: value}})
    )
    result = runner.invoke(app, ["regress", "-c", str(config)])
    assert result.exit_code == 2, result.output
    assert field in result.stderr


@pytest.mark.parametrize(("field", "value"), BAD)
def test_build_yaml_exits_2_naming_the_key_before_any_step(runner, tmp_path, field, value):
    config = tmp_path / "copilot-opt.yaml"
    (tmp_path / "templates").mkdir()
    (tmp_path / "repo").mkdir()
    (tmp_path / "p.jsonl").write_text('{"prompt": "x"}\n')
    config.write_text(
        yaml.safe_dump(
            {
                "templates": "templates",
                "repositories": ["repo"],
                "regress": {"prompts": "p.jsonl", "thresholds": {field: value}},
            }
        )
    )
    result = runner.invoke(app, ["build", "-c", str(config), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert f"regress.thresholds.{field}" in result.stderr
    assert not (tmp_path / "out").exists()


def _summary(kl: float, top1: float) -> Summary:
    return Summary(
        positions=100,
        kl_mean=kl,
        kl_se=0.0,
        kl_percentiles={},
        kl_max=kl,
        same_top1=top1,
        same_top1_se=0.0,
        delta_p_mean=0.0,
        delta_p_rms=0.0,
        top5_overlap=1.0,
    )


def test_nan_measurements_fail_the_gate():
    ok = Thresholds()
    assert verdict(_summary(0.0, 1.0), {"p": 0.0}, None, ok) == []
    assert verdict(_summary(math.nan, 1.0), {"p": 0.0}, None, ok)
    assert verdict(_summary(0.0, math.nan), {"p": 0.0}, None, ok)
    assert verdict(_summary(0.0, 1.0), {"p": math.nan}, None, ok)
    gate = Thresholds(min_exact_match=0.5, min_bleu=0.5)
    generation = {"exact_match": math.nan, "bleu4": math.nan}
    assert len(verdict(_summary(0.0, 1.0), {"p": 0.0}, generation, gate)) == 2


LAX_ENV = {
    "COPILOT_OPT_REGRESS_MAX_MEAN_KL": "1e300",
    "COPILOT_OPT_REGRESS_MIN_SAME_TOP1": "0",
    "COPILOT_OPT_REGRESS_MAX_PROMPT_KL": "1e300",
}


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_mean_kl", 1.5), ("max_prompt_kl", 1e300), ("min_same_top1", 0.49)],
)
def test_a_lax_threshold_is_refused_unless_allowed(field, value):
    with pytest.raises(InputError) as info:
        Thresholds(**{field: value})
    assert info.value.where == field and "allow-lax-thresholds" in str(info.value)
    allowed = Thresholds(**{field: value}, allow_lax=True)
    assert list(allowed.lax()) == [field]
    assert not Thresholds(max_mean_kl=1.0, max_prompt_kl=1.0, min_same_top1=0.5).lax()


def test_environment_cannot_switch_the_gate_off_without_a_word(runner, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "def add(a, b):"}\n{"prompt": "class Stack:"}\n')
    args = ["regress", "--prompts", str(prompts), "-v", "i8=kv-dtype=int8"]
    args += ["--gen-tokens", "1", "--max-tokens", "16"]
    refused = runner.invoke(app, args, env=LAX_ENV)
    assert refused.exit_code == 2, refused.output
    assert "--max-mean-kl" in refused.stderr and "Traceback" not in refused.output

    reports = ["--markdown", str(tmp_path / "r.md"), "--junit", str(tmp_path / "r.xml")]
    reports += ["--html", str(tmp_path / "r.html"), "--json", str(tmp_path / "r.json")]
    allowed = runner.invoke(app, [*args, *reports, "--allow-lax-thresholds"], env=LAX_ENV)
    assert allowed.exit_code == 0, allowed.output
    assert "lax threshold" in allowed.stderr
    lax = json.loads((tmp_path / "r.json").read_text())["lax_thresholds"]
    assert set(lax) == {"max_mean_kl", "min_same_top1", "max_prompt_kl"}
    for name in ("r.md", "r.xml", "r.html"):
        assert "LAX THRESHOLDS" in (tmp_path / name).read_text(), name


def test_lax_thresholds_in_yaml_need_allow_lax_there(runner, tmp_path):
    config = tmp_path / "regress.yaml"
    config.write_text(
        yaml.safe_dump({"variants": ["x=kv-dtype=int8"], "thresholds": {"min_same_top1": 0}})
    )
    result = runner.invoke(app, ["regress", "-c", str(config)])
    assert result.exit_code == 2, result.output
    assert "thresholds.min_same_top1" in result.stderr


def test_a_generation_threshold_with_no_generation_is_an_error(runner, tmp_path):
    config = tmp_path / "regress.yaml"
    config.write_text(
        yaml.safe_dump({"variants": ["x=kv-dtype=int8"], "thresholds": {"min_exact_match": 1.0}})
    )
    result = runner.invoke(app, ["regress", "-c", str(config), "--gen-tokens", "0"])
    assert result.exit_code == 2, result.output
    assert "--gen-tokens" in result.stderr and "min_exact_match" in result.stderr


def test_defaults_stated_in_regress_help_are_the_options_defaults():
    """regress's flags default to None (so a regress.yaml can set them); their help, declared
    beside the default in the options field, states the default in words, and those words must
    be the options' own defaults."""
    import inspect as pyinspect
    import re

    from copilot_cli.cli.regress import regress_command
    from copilot_cli.core.options import default_of

    checked = 0
    for param in pyinspect.signature(regress_command.__wrapped__).parameters.values():
        source = getattr(param.default, "declared_by", None)
        help_text = getattr(param.default, "help", None) or ""
        stated = re.search(r"[Dd]efault ([0-9](?:[0-9e.-]*[0-9])?)", help_text)
        if source is None or stated is None:
            continue
        assert float(stated.group(1)) == default_of(*source), source
        checked += 1
    assert checked >= 7
