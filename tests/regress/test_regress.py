"""regress end to end on the shipped model: variants, baselines, reports, bad input."""

import json
from html.parser import HTMLParser
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from copilot_cli.cli import app
from copilot_cli.core.errors import ArtifactError, FingerprintMismatch, InputError
from copilot_cli.core.models import ModelSpec, load_model
from copilot_cli.kv import PrefillOptions, PrefixSource, prefill_sources
from copilot_cli.quant import QuantizeOptions, quantize_embeddings
from copilot_cli.quant.format import FILENAME, read, write
from copilot_cli.regress import RegressOptions, Thresholds, parse_variant, run_regress

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def shipped():
    return load_model(ModelSpec())


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory, shipped):
    root = tmp_path_factory.mktemp("regress")
    quantize_embeddings(QuantizeOptions(out=root / "q8", prompts=None), shipped)
    prefill_sources(
        shipped,
        [
            PrefixSource("sys", "You write Python code.\n" * 8, "t"),
            PrefixSource("sys2", "You review Python code.\n" * 8, "t"),
        ],
        PrefillOptions(out=root / "kv"),
    )
    prompts = root / "prompts.jsonl"
    lines = (REPO / "sample_data" / "prompts.jsonl").read_text().splitlines()
    prompts.write_text("\n".join(lines[::5]) + "\n")  # 7 prompts across all tasks
    return root, prompts


def run_regress_with(loaded, options):
    return run_regress(options, loaded)


def _options(prompts, *specs, **kw):
    return RegressOptions(
        prompts=prompts,
        variants=specs,
        gen_tokens=kw.pop("gen_tokens", 4),
        max_tokens=64,
        **kw,
    )


def test_variants_pass_and_kv_is_exact(shipped, artifacts):
    root, prompts = artifacts
    result = run_regress_with(
        shipped,
        _options(
            prompts,
            f"q8=quant={root / 'q8'}",
            f"cached=kv={root / 'kv'}",
            "f16=kv-dtype=float16",
            f"both=quant={root / 'q8'}+kv={root / 'kv'}",
            null_control=True,
            thresholds=Thresholds(min_same_top1=0.95),
        ),
    )
    by_name = {v.name: v for v in result.variants}
    assert result.passed, [v.failures for v in result.variants]
    assert by_name["cached"].summary.kl_max < 1e-8  # cached prefix == recomputed prefix
    assert by_name["null-control"].summary.kl_max == 0
    assert 0 < by_name["q8"].summary.kl_mean < 1e-3
    assert by_name["q8"].generation.continuations == 7
    assert set(by_name["q8"].groups) >= {"completion", "review"}
    assert result.timing.metric_seconds < result.timing.forward_seconds


def test_baseline_round_trip_gives_the_same_numbers(shipped, artifacts, tmp_path):
    root, prompts = artifacts
    spec = f"q8=quant={root / 'q8'}"
    live = run_regress_with(shipped, _options(prompts, spec, save_baseline=tmp_path / "b.st"))
    reused = run_regress_with(shipped, _options(prompts, spec, baseline=tmp_path / "b.st"))
    assert reused.variants[0].summary.kl_mean == pytest.approx(
        live.variants[0].summary.kl_mean, rel=1e-4
    )
    assert reused.variants[0].generation == live.variants[0].generation
    run_regress_with(
        shipped, _options(prompts, spec, save_baseline=tmp_path / "k.st", baseline_topk=32)
    )
    topk = run_regress_with(shipped, _options(prompts, spec, baseline=tmp_path / "k.st"))
    assert topk.variants[0].summary.kl_mean <= live.variants[0].summary.kl_mean * 1.01
    assert (tmp_path / "k.st").stat().st_size < (tmp_path / "b.st").stat().st_size / 20


def test_baseline_for_other_prompts_or_model_is_refused(
    shipped, artifacts, tmp_path, tiny_llama_dir
):
    root, prompts = artifacts
    spec = f"q8=quant={root / 'q8'}"
    run_regress_with(shipped, _options(prompts, spec, save_baseline=tmp_path / "b.st"))
    other_prompts = tmp_path / "other.jsonl"
    other_prompts.write_text('{"prompt": "def f():\\n    return 1\\n"}\n')
    with pytest.raises(ArtifactError, match="prompts hash"):
        run_regress_with(shipped, _options(other_prompts, spec, baseline=tmp_path / "b.st"))
    other = load_model(ModelSpec(str(tiny_llama_dir)))
    with pytest.raises(FingerprintMismatch):
        run_regress_with(other, _options(prompts, "kv-dtype=int8", baseline=tmp_path / "b.st"))


@pytest.mark.parametrize("topk", [0, 16])
def test_a_forged_baseline_is_refused_when_the_model_is_at_hand(artifacts, tmp_path, topk):
    """A baseline rewritten with another model's log-probs (here: the shipped model with its
    embeddings damaged, keeping its original fingerprints) and sealed by our own writer, as a
    forger would: the recomputed sample gives it away, whichever cases are drawn."""
    import torch

    root, prompts = artifacts
    forger = load_model(ModelSpec())
    with torch.no_grad():
        weight = forger.model.get_input_embeddings().weight
        weight.add_(torch.randn(weight.shape, generator=torch.Generator().manual_seed(0)) * 0.5)
    forged = tmp_path / "forged.st"
    run_regress_with(
        forger, _options(prompts, null_control=True, save_baseline=forged, baseline_topk=topk)
    )
    honest = load_model(ModelSpec())
    assert honest.model_fingerprint == forger.model_fingerprint  # the forgery passes that check
    spec = f"q8=quant={root / 'q8'}"
    for _ in range(3):  # a different random draw each run
        with pytest.raises(ArtifactError, match="does not match the model"):
            run_regress_with(honest, _options(prompts, spec, baseline=forged))
    unchecked = run_regress_with(honest, _options(prompts, spec, baseline=forged, baseline_check=0))
    assert not unchecked.passed  # what the check is for: without it the forgery decides
    # switched off, the check is named in every report, as lax thresholds are
    from copilot_cli.regress.reports import html_report, junit_xml, markdown

    assert unchecked.to_dict()["baseline_checked"] is False
    for report in (markdown(unchecked), junit_xml(unchecked), html_report(unchecked)):
        assert "BASELINE NOT CHECKED" in report
    checked_report = markdown(run_regress_with(honest, _options(prompts, spec)))
    assert "BASELINE NOT CHECKED" not in checked_report


def test_variant_made_for_another_model_is_refused(artifacts, tiny_llama_dir):
    root, prompts = artifacts
    other = load_model(ModelSpec(str(tiny_llama_dir)))
    with pytest.raises(FingerprintMismatch):
        run_regress_with(other, _options(prompts, f"q8=quant={root / 'q8'}"))


def test_nan_logits_fail_the_variant(shipped, artifacts, tmp_path):
    root, prompts = artifacts
    tables, metadata = read(root / "q8" / FILENAME)
    scales = tables["embed"].table.scales.clone()
    scales[:] = float("inf")
    tables["embed"].table.scales = scales
    (tmp_path / "bad").mkdir()
    keep = {"format", "format_version", "copilot_opt_version", "torch_version", "digest"}

    def decode(value):
        try:
            return json.loads(value)
        except ValueError:
            return value

    write(
        tmp_path / "bad" / FILENAME,
        tables,
        {k: decode(v) for k, v in metadata.items() if k not in keep},
    )
    result = run_regress_with(
        shipped, _options(prompts, f"bad=quant={tmp_path / 'bad'}", gen_tokens=0)
    )
    assert not result.passed and "NaN" in result.variants[0].failures[0]


def test_variant_parsing():
    spec = parse_variant("kv-dtype=int8")
    assert spec.name == "kv-dtype=int8" and spec.case_set == "split"
    with pytest.raises(InputError, match="kinds: quant, kv, kv-dtype"):
        parse_variant("x=zip=3")
    with pytest.raises(InputError, match="does not exist"):
        parse_variant("q=quant=/no/such/dir")
    with pytest.raises(InputError, match="kv-dtype must be"):
        parse_variant("kv-dtype=float8")
    with pytest.raises(InputError, match="cannot be named 'kv', the name of a kind"):
        parse_variant("kv=kv=.")  # the folder exists: the name is what is wrong


def test_cli_reports_and_exit_codes(runner, artifacts, tmp_path):
    root, prompts = artifacts
    args = [
        "regress",
        "--prompts",
        str(prompts),
        "-v",
        f"q8=quant={root / 'q8'}",
        "-v",
        "i8=kv-dtype=int8",
        "--gen-tokens",
        "2",
        "--max-tokens",
        "48",
        "--junit",
        str(tmp_path / "r.xml"),
        "--markdown",
        str(tmp_path / "r.md"),
        "--html",
        str(tmp_path / "r.html"),
        "--json",
        str(tmp_path / "r.json"),
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["passed"] and report["provenance"]["prompts_hash"]
    suites = ET.parse(tmp_path / "r.xml").getroot()
    cases = suites.findall(".//testcase")
    assert len(cases) >= 2 * 5 and not suites.findall(".//failure")
    markdown = (tmp_path / "r.md").read_text()
    assert "| `q8` |" in markdown and len(markdown.encode()) < 1 << 20
    page = (tmp_path / "r.html").read_text()
    HTMLParser().feed(page)
    assert page.count("<svg") >= 2

    strict = runner.invoke(app, [*args[:11], "--max-mean-kl", "1e-9", "--json", "-"])
    assert strict.exit_code == 1
    assert json.loads(strict.stdout)["passed"] is False


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"prompt": "ok"}\n{"prompt": \n', ":2"),
        ('{"id": "x"}\n', ":1"),
        ("", "no prompts"),
    ],
)
def test_cli_bad_prompts_exit_2(runner, tmp_path, content, message):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(content)
    result = runner.invoke(app, ["regress", "--prompts", str(prompts), "-v", "kv-dtype=int8"])
    assert result.exit_code == 2 and message in result.stderr


def test_cli_unknown_kind_and_bad_config(runner, tmp_path):
    result = runner.invoke(app, ["regress", "-v", "x=nope=1"])
    assert result.exit_code == 2 and "quant, kv, kv-dtype" in result.stderr
    config = tmp_path / "regress.yaml"
    config.write_text("variants: [kv-dtype=int8]\nthresholds:\n  max_mean_kll: 1\n")
    result = runner.invoke(app, ["regress", "--config", str(config)])
    assert result.exit_code == 2
    assert "thresholds.max_mean_kll" in result.stderr and "regress.yaml:3" in result.stderr


def test_vllm_engine_variants_are_checked_before_any_work(runner, tmp_path):
    """--engine vllm takes vllm and kv kinds only, engine options by name, no Ray; without vLLM
    installed (this venv) it is one line and exit 2, before a model loads."""
    from copilot_cli.regress.variants import ENGINE_KINDS, engine_options

    spec = parse_variant("fp8=vllm=kv-cache-dtype:fp8,logprobs:64", ENGINE_KINDS["vllm"])
    assert spec.case_set == "prompts"
    assert engine_options(spec.kind("vllm").arg) == {"kv-cache-dtype": "fp8", "logprobs": "64"}
    both = parse_variant(f"c=vllm=default+kv={tmp_path}", ENGINE_KINDS["vllm"])
    assert both.case_set == f"kv:{tmp_path}"
    for bad, words in (
        ("x=vllm=kv-cache-dtype", "KEY:VALUE"),
        ("x=vllm=color:red", "keys kv-cache-dtype"),
        ("x=vllm=logprobs:0", "full or a count"),
        ("x=vllm=dtype:a,dtype:b", "each once"),
        ("x=quant=.", "kinds: vllm, kv"),
    ):
        with pytest.raises(InputError, match=words):
            parse_variant(bad, ENGINE_KINDS["vllm"])
    with pytest.raises(InputError, match="vllm model folder does not exist"):
        parse_variant("x=vllm=model:/no/such/model", ENGINE_KINDS["vllm"])
    with pytest.raises(InputError, match="kinds: quant"):
        parse_variant("x=vllm=default")  # the transformers engine has no vllm kind
    result = runner.invoke(
        app, ["regress", "--engine", "vllm", "--ray", "local", "-v", "a=vllm=default"]
    )
    assert result.exit_code == 2 and "--engine vllm runs in this process" in result.stderr
    result = runner.invoke(app, ["regress", "--engine", "tgi", "-v", "a=vllm=default"])
    assert result.exit_code == 2 and "transformers, vllm" in result.stderr
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        result = runner.invoke(app, ["regress", "--engine", "vllm", "-v", "a=vllm=default"])
        assert result.exit_code == 2, result.output
        assert "vllm is not installed here" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_cli_variant_for_another_model_exit_2(runner, artifacts, tiny_llama_dir):
    root, prompts = artifacts
    result = runner.invoke(
        app,
        [
            "regress",
            "--model",
            str(tiny_llama_dir),
            "--prompts",
            str(prompts),
            "-v",
            f"q=quant={root / 'q8'}",
        ],
    )
    assert result.exit_code == 2 and "made for model" in result.stderr


def test_ctrl_c_says_what_was_finished_and_leaves_a_partial_report(runner, monkeypatch, tmp_path):
    import copilot_cli.regress.runner as regress_runner

    real, calls = regress_runner.score, []

    def interrupted_on_the_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(regress_runner, "score", interrupted_on_the_third)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        "".join(f'{{"prompt": "def f{i}(x):\\n    return x + {i}"}}\n' for i in range(5))
    )
    report, junit = tmp_path / "r.json", tmp_path / "r.xml"
    args = ["regress", "--prompts", str(prompts), "-v", "i8=kv-dtype=int8", "--gen-tokens", "1"]
    args += ["--batch-size", "1", "--json", str(report), "--junit", str(junit)]
    result = runner.invoke(app, args)
    assert result.exit_code == 130, result.output
    assert "interrupted after 2 of 5 cases (i8: mean KL" in result.stderr
    assert "over 2 cases; no verdict from a part)" in result.stderr
    written = json.loads(report.read_text())
    assert written["passed"] is False and written["partial"].startswith("interrupted after 2 of 5")
    assert len(written["variants"][0]["prompt_kl"]) == 2
    assert 'failures="1"' in junit.read_text() and "partial report" in junit.read_text()
