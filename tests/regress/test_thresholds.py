"""A gate that cannot be switched off by accident: every threshold finite and in its range,
from flags, regress.yaml and copilot-opt.yaml alike; a NaN measurement fails."""

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
