"""build: the whole pipeline, incremental, locked, resumable, with clear config errors."""

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from copilot_cli.cli import app
from copilot_cli.pipeline import BuildOptions, run_build
from copilot_cli.pipeline.lock import build_lock

REPO = Path(__file__).resolve().parents[2]


def _project(tmp_path: Path, **overrides) -> Path:
    shutil.copytree(REPO / "templates", tmp_path / "templates")
    (tmp_path / "repo").mkdir()
    for name in ("lru.py", "ttl_cache.py", "protocol.py"):
        shutil.copy(REPO / "sample_data/repo/src/kvstore" / name, tmp_path / "repo" / name)
    lines = (REPO / "sample_data/prompts.jsonl").read_text().splitlines()
    (tmp_path / "prompts.jsonl").write_text("\n".join(lines[::6]) + "\n")
    regress = {
        "prompts": "prompts.jsonl",
        "gen_tokens": 2,
        "max_tokens": 64,
        "thresholds": {"min_same_top1": 0.9},
    }
    regress.update(overrides.pop("regress", {}))
    config = {
        "templates": "templates",
        "repositories": ["repo"],
        "regress": regress,
        "chunk": {"max_tokens": 128},
        **overrides,
    }
    import yaml

    (tmp_path / "copilot-opt.yaml").write_text(yaml.safe_dump(config))
    return tmp_path / "copilot-opt.yaml"


def _steps(result):
    return {s.name: s for s in result.steps}


def test_build_then_rebuild_does_no_model_work(tmp_path, monkeypatch):
    config = _project(tmp_path)
    first = run_build(BuildOptions(config, tmp_path / "build"))
    assert first.verdict == "pass"
    assert {s.action for s in first.steps} == {"ran"}
    manifest = json.loads((tmp_path / "build" / "build-manifest.json").read_text())
    for name, step in manifest["steps"].items():
        assert step["inputs_hash"] and step["outputs"] and step["seconds"] >= 0, name
    assert manifest["verdict"] == "pass"
    assert (tmp_path / "build" / "reports" / "regress.html").exists()

    def no_model(*args, **kwargs):
        raise AssertionError("an unchanged build loaded the model")

    monkeypatch.setattr("copilot_cli.core.models.load_model", no_model)
    second = run_build(BuildOptions(config, tmp_path / "build"))
    assert {s.action for s in second.steps} == {"skipped"} and second.verdict == "pass"


def test_changing_one_template_recomputes_only_its_prefix(tmp_path):
    config = _project(tmp_path)
    run_build(BuildOptions(config, tmp_path / "build"))
    target = tmp_path / "templates" / "sql_to_python.j2"
    target.write_text(target.read_text().replace("Keep NULL semantics", "Keep SQL NULL semantics"))
    plan = _steps(run_build(BuildOptions(config, tmp_path / "build", dry_run=True)))
    assert plan["compile-templates"].action == "run"
    assert "templates" in plan["compile-templates"].reason
    assert plan["chunk:repo"].action == "skip"
    # the templates are part of quantize's default frequency corpus: it depends on them too
    assert plan["quantize"].action == "run" and "corpus" in plan["quantize"].reason
    result = _steps(run_build(BuildOptions(config, tmp_path / "build")))
    assert result["compile-templates"].summary["recompiled"] == 1
    kv = result["prefill-kv"].summary
    assert 0 < kv["computed_tokens"] < kv["distinct_tokens"] / 2
    assert result["chunk:repo"].action == "skipped"
    assert result["regress"].action == "ran"


def test_failing_step_keeps_the_last_good_state(tmp_path, runner):
    config = _project(
        tmp_path,
        regress={"enabled": False},
        prefill_kv={"enabled": False},
        quantize={"enabled": False},
    )
    run_build(BuildOptions(config, tmp_path / "build"))
    before = (tmp_path / "build" / "build-manifest.json").read_bytes()
    bundle_before = (tmp_path / "build" / "templates" / "manifest.json").read_bytes()
    (tmp_path / "templates" / "broken.j2").write_text(
        "---\nname: b\ndescription: d\nversion: 1\ninputs: {}\n---\n{{ x "
    )
    result = runner.invoke(app, ["build", "-c", str(config), "-o", str(tmp_path / "build")])
    assert result.exit_code == 2 and "broken.j2" in result.stderr
    assert (tmp_path / "build" / "build-manifest.json").read_bytes() == before
    assert (tmp_path / "build" / "templates" / "manifest.json").read_bytes() == bundle_before


def test_regression_exits_1(tmp_path, runner):
    config = _project(
        tmp_path, regress={"thresholds": {"max_mean_kl": 1e-15}}, chunk={"enabled": False}
    )
    result = runner.invoke(app, ["build", "-c", str(config), "-o", str(tmp_path / "build")])
    assert result.exit_code == 1 and "regression" in result.stderr
    manifest = json.loads((tmp_path / "build" / "build-manifest.json").read_text())
    assert manifest["verdict"] == "fail"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("templates: templates\nunknown_key: 1\n", "unknown key 'unknown_key'"),
        ("templates: templates\nchunk:\n  max_tokens: lots\n", "chunk.max_tokens"),
        ("templates: nowhere\n", "templates: "),
        ("templates: templates\nrepositories: []\n", "repositories: is empty"),
        ("templates: templates\nrepositories: [repo, repo]\n", "repositories[1]: "),
        ("templates: templates\nrepositories: [repo, other/repo]\n", "chunks/repo.jsonl"),
        ("templates: templates\nrepositories: [repo]\nmodel: ./no/such/model\n", "model: "),
        ("templates: templates\nrepositories: [repo]\nmodel: m.gguf\n", "model: "),
        (
            "templates: templates\nrepositories: [repo]\ncompile_templates:\n"
            "  limits: {max_seconds: .nan}\n",
            "compile_templates.limits.max_seconds: must be a finite number",
        ),
        (
            "templates: templates\nrepositories: [repo]\ncompile_templates:\n"
            "  limits: {max_output_chars: 0}\n",
            "compile_templates.limits.max_output_chars",
        ),
    ],
)
def test_bad_config_exit_2_naming_the_key(tmp_path, runner, text, message):
    config = _project(tmp_path)
    (tmp_path / "other" / "repo").mkdir(parents=True)
    config.write_text(text)
    result = runner.invoke(app, ["build", "-c", str(config), "-o", str(tmp_path / "build")])
    assert result.exit_code == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "build").exists()


def test_bad_config_names_the_line(tmp_path, runner):
    config = _project(tmp_path)
    config.write_text("templates: templates\nquantize:\n  bits: 3\n")
    result = runner.invoke(app, ["build", "-c", str(config), "-o", str(tmp_path / "build")])
    assert result.exit_code == 2 and "quantize.bits" in result.stderr and ":3" in result.stderr


def test_a_second_build_on_the_same_folder_is_refused(tmp_path, runner):
    config = _project(tmp_path)
    with build_lock(tmp_path / "build"):
        result = runner.invoke(app, ["build", "-c", str(config), "-o", str(tmp_path / "build")])
    assert result.exit_code == 2 and "another build" in result.stderr


def test_interrupted_build_resumes_from_finished_steps(tmp_path):
    config = _project(tmp_path, regress={"gen_tokens": 64})
    out = tmp_path / "build"
    proc = subprocess.Popen(
        [sys.executable, "-m", "copilot_cli", "build", "-c", str(config), "-o", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    manifest = out / "build-manifest.json"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if manifest.exists() and "quantize" in json.loads(manifest.read_text())["steps"]:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode in (130, 0)
    finished = set(json.loads(manifest.read_text())["steps"])
    assert {"compile-templates", "prefill-kv", "quantize"} <= finished
    resumed = _steps(run_build(BuildOptions(config, out)))
    for name in ("compile-templates", "prefill-kv", "quantize", "chunk:repo"):
        assert resumed[name].action == "skipped", name
    assert resumed["regress"].action == ("ran" if proc.returncode == 130 else "skipped")


def test_the_context_section_writes_overview_prefixes_and_their_kv(tmp_path):
    from copilot_cli.kv import KVCacheDir
    from copilot_cli.prompts import load_bundle

    config = _project(
        tmp_path,
        context={"enabled": True, "budget": 128},
        quantize={"enabled": False},
        regress={"enabled": False},
    )
    out = tmp_path / "build"
    first = _steps(run_build(BuildOptions(config, out)))
    assert first["context:repo"].action == "ran"
    folder = out / "context" / "repo"
    overview = json.loads((folder / "overview.json").read_text())
    assert overview["format"] == "copilot-opt.repository-overview" and overview["tokens"] <= 128
    bundle = load_bundle(out / "templates")
    prefixes = sorted(folder.glob("*.txt"))
    assert {p.stem for p in prefixes} == {
        n for n in bundle.templates() if "overview" in bundle.entry(n).schema["properties"]
    }
    for path in prefixes:  # the template's static prefix, then the overview
        text = path.read_text()
        assert text.startswith(bundle.static_prefix(path.stem))
        assert text.endswith(overview["text"].rstrip())
    kv = KVCacheDir(folder / "kv")
    assert sorted(kv.names()) == sorted(p.name for p in prefixes)
    _inspect_clean(out)
    again = _steps(run_build(BuildOptions(config, out)))
    assert again["context:repo"].action == "skipped"
    _inspect_clean(out)
    segment = sorted((folder / "kv" / "segments").glob("*.safetensors"))[0]
    data = bytearray(segment.read_bytes())
    data[-3] ^= 0x10  # one bit of a stored value
    segment.write_bytes(bytes(data))
    flipped = CliRunner().invoke(app, ["inspect", str(out)])
    assert flipped.exit_code == 1 and f"bad: {segment}" in flipped.stderr, flipped.stderr
    (tmp_path / "repo" / "lru.py").write_text("def renamed():\n    return 1\n")
    third = _steps(run_build(BuildOptions(config, out)))
    assert third["chunk:repo"].action == "ran" and third["context:repo"].action == "ran"
    _inspect_clean(out)


def _inspect_clean(out: Path) -> None:
    result = CliRunner().invoke(app, ["inspect", str(out)])
    assert result.exit_code == 0, result.stderr


def test_a_build_killed_then_rerun_inspects_clean(tmp_path):
    config = _project(
        tmp_path, context={"enabled": True, "budget": 128}, regress={"enabled": False}
    )
    out = tmp_path / "build"
    proc = subprocess.Popen(
        [sys.executable, "-m", "copilot_cli", "build", "-c", str(config), "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    manifest = out / "build-manifest.json"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError, ValueError):
            if "context:repo" in json.loads(manifest.read_text())["steps"]:
                break
        time.sleep(0.02)
    proc.kill()  # kill -9 in the middle of quantize
    proc.wait()
    run_build(BuildOptions(config, out))
    _inspect_clean(out)


def test_inspect_build_notices_an_artifact_replaced_after_the_verdict(tmp_path, runner):
    config = _project(tmp_path)
    build = tmp_path / "build"
    assert run_build(BuildOptions(config, build)).verdict == "pass"
    intact = runner.invoke(app, ["inspect", str(build)])
    assert intact.exit_code == 0, intact.output
    other = tmp_path / "other-quant"
    made = runner.invoke(app, ["quantize", "--bits", "4", "-o", str(other)])
    assert made.exit_code == 0, made.output
    shutil.rmtree(build / "quant")
    shutil.move(other, build / "quant")  # a valid artifact, but not the one the gate judged
    (build / "chunks" / "repo.jsonl").unlink()
    result = runner.invoke(app, ["inspect", str(build)])
    assert result.exit_code == 1, result.output
    assert f"bad: {build / 'quant' / 'embeddings.safetensors'}: not what quantize wrote" in (
        result.stderr
    )
    assert f"bad: {build / 'chunks' / 'repo.jsonl'}: missing (written by chunk:repo)" in (
        result.stderr
    )


def test_a_template_named_like_a_path_stops_the_build_before_anything_is_written(tmp_path, runner):
    config = _project(tmp_path, context={"enabled": True})
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "notes.txt").write_text("mine")
    template = tmp_path / "templates" / "bug_fix.j2"
    template.write_text(template.read_text().replace("name: bug-fix", "name: ../../victim/notes"))
    out = tmp_path / "build"
    result = runner.invoke(app, ["build", "-c", str(config), "-o", str(out)])
    assert result.exit_code == 2 and "is not a template name" in result.stderr
    assert "bug_fix.j2" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert (victim / "notes.txt").read_text() == "mine" and not (out / "context").exists()


def test_an_unchanged_rebuild_imports_no_torch_and_a_changed_weight_is_noticed(tmp_path):
    """The no-op rebuild decides from file digests and the recorded settings alone: a fresh
    process imports neither torch nor transformers and says there is nothing to do. The model's
    identity is reused only for the folder's exact files: a changed weight reruns every step,
    a re-saved file that computes the same (generation_config.json) reruns none."""
    from copilot_cli.core.modelspec import SHIPPED_MODEL

    model = tmp_path / "model"
    shutil.copytree(SHIPPED_MODEL, model)
    config = _project(tmp_path, model=str(model))
    run_build(BuildOptions(config, tmp_path / "build"))
    code = (
        "import sys\n"
        "from copilot_cli.cli import app\n"
        f"sys.argv = ['copilot-opt', 'build', '-c', {str(config)!r}, '-o', "
        f"{str(tmp_path / 'build')!r}]\n"
        "try:\n    app()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("[]"), done.stdout
    assert "nothing to do" in done.stderr

    generation = model / "generation_config.json"
    generation.write_text(generation.read_text() + "\n")
    plan = run_build(BuildOptions(config, tmp_path / "build", dry_run=True))
    assert {s.action for s in plan.steps} == {"skip"}

    from safetensors.torch import load_file, save_file

    weights = load_file(model / "model.safetensors")
    name = sorted(weights)[0]
    weights[name] = weights[name].clone()
    weights[name].view(-1)[0] += 1.0
    save_file(weights, model / "model.safetensors", metadata={"format": "pt"})
    plan = run_build(BuildOptions(config, tmp_path / "build", dry_run=True))
    assert {s.action for s in plan.steps} == {"run"}
    assert "inputs changed: model" in _steps(plan)["compile-templates"].reason
