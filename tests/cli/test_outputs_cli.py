"""Every writer, pointed at something copilot-opt did not write: exit 2 naming the path, nothing
touched; pointed at its own earlier output: replaced as before (docs/cli.md, "What -o may be")."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from copilot_cli.cli import app
from tests.cli.test_hostile_inputs import PROMPTS, REPO, VARIANT, _refused

HOME = {  # a home folder holding only dot entries: what a mistyped -o ~ would destroy
    ".bashrc": "alias ll='ls -l'",
    ".ssh/id_ed25519": "-----BEGIN OPENSSH PRIVATE KEY-----",
    ".git/HEAD": "ref: refs/heads/main",
    ".env": "TOKEN=secret",
    ".cache/pip/x": "cached",
}


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    for name, text in HOME.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)
    return home


@pytest.mark.parametrize(
    "args",
    [
        ["quantize", "-o", "{home}", "--no-fidelity"],
        ["prefill-kv", "-o", "{home}", "--text", str(REPO / "README.md")],
        ["compile-templates", str(REPO / "templates"), "-o", "{home}"],
        ["build", "-c", str(REPO / "copilot-opt.yaml"), "-o", "{home}"],
    ],
    ids=lambda a: a[0],
)
def test_a_folder_of_dot_files_is_never_replaced(runner, tmp_path, args):
    home = _home(tmp_path)
    before = _tree(home)
    _refused(runner, [a.format(home=home) for a in args], str(home), "did not write")
    assert _tree(home) == before and sorted(os.listdir(home)) == sorted(
        {n.split("/")[0] for n in HOME}
    )


def test_prefill_kv_into_the_bundle_folder_leaves_the_bundle_alone(runner, tmp_path):
    bundle = tmp_path / "bundle"
    result = runner.invoke(app, ["compile-templates", str(REPO / "templates"), "-o", str(bundle)])
    assert result.exit_code == 0, result.output
    before = _tree(bundle)
    _refused(runner, ["prefill-kv", str(bundle), "-o", str(bundle)], "prompt-bundle", "KV folder")
    assert _tree(bundle) == before
    assert runner.invoke(app, ["inspect", str(bundle)]).exit_code == 0


@pytest.mark.parametrize("flag", ["-o", "--registry"])
def test_chunk_onto_a_file_of_the_repository_is_refused(runner, tmp_path, flag):
    repo = Path(shutil.copytree(REPO / "sample_data" / "repo", tmp_path / "repo"))
    victim = sorted(p for p in repo.rglob("*.py"))[0]
    before = victim.read_bytes()
    args = ["chunk", str(repo), flag, str(victim)]
    if flag == "--registry":
        args += ["-o", str(tmp_path / "c.jsonl")]
    _refused(runner, args, str(victim), "not a chunk")
    assert victim.read_bytes() == before and not (tmp_path / "c.jsonl").exists()


def test_chunk_replaces_its_own_files(runner, tmp_path):
    args = ["chunk", str(REPO / "sample_data" / "repo"), "-o", str(tmp_path / "c.jsonl")]
    args += ["--registry", str(tmp_path / "r.json")]
    for _ in range(2):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output


@pytest.mark.parametrize("flag", ["--json", "--junit", "--markdown", "--html", "--save-baseline"])
def test_regress_outputs_onto_files_it_did_not_write(runner, tmp_path, flag):
    notes = tmp_path / "notes.md"
    notes.write_text("# my notes\n")
    args = ["regress", "--prompts", str(PROMPTS), flag, str(notes)]
    _refused(runner, args + ([] if flag == "--save-baseline" else VARIANT), flag, str(notes))
    assert notes.read_text() == "# my notes\n"


def test_regress_never_writes_a_report_over_its_prompts(runner, tmp_path):
    prompts = Path(shutil.copy(PROMPTS, tmp_path / "p.jsonl"))
    before = prompts.read_bytes()
    _refused(runner, ["regress", "--prompts", str(prompts), *VARIANT, "--json", str(prompts)])
    assert prompts.read_bytes() == before


def test_warm_plan_onto_a_file_it_did_not_write(runner, tmp_path, shipped_artifacts):
    log = tmp_path / "log.jsonl"
    log.write_text('{"t": 1, "prefix": "a"}\n')
    out = tmp_path / "plan.json"
    out.write_text('{"mine": true}')
    kv = ["--kv", str(shipped_artifacts[0] / "kv"), "--budget", "1000"]
    _refused(runner, ["warm-plan", str(log), "-o", str(out), *kv], str(out))
    assert out.read_text() == '{"mine": true}'
    _refused(runner, ["warm-plan", str(log), "-o", str(log), *kv], "also an input")


def test_prune_replaces_only_its_own_output(runner, tmp_path):
    source = Path(shutil.copy(REPO / "sample_data" / "repo" / "README.md", tmp_path / "in.md"))
    out = tmp_path / "out.md"
    args = ["prune", str(source), "--rate", "0.5", "-o", str(out)]
    for _ in range(2):  # the second run replaces what the first wrote
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
    out.write_text(out.read_text() + "\nmy edit\n")
    _refused(runner, args, str(out), "not a pruned text")
    assert out.read_text().endswith("my edit\n")
    before = source.read_bytes()
    _refused(runner, ["prune", str(source), "--rate", "0.5", "-o", str(source)], "also an input")
    assert source.read_bytes() == before


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["prefill-kv", "-o", "{file}/kv", "--text", str(REPO / "README.md")], "--out"),
        (["chunk", str(REPO / "sample_data/repo"), "-o", "{file}/c.jsonl"], "--out"),
        (["regress", "--prompts", str(PROMPTS), *VARIANT, "--html", "{file}/r.html"], "--html"),
        (
            ["regress", "--prompts", str(PROMPTS), *VARIANT, "--markdown", "{file}/r.md"],
            "--markdown",
        ),
        (["quantize", "-o", "{file}/q"], "--out"),
        (["compile-templates", str(REPO / "templates"), "-o", "{file}/b"], "--out"),
    ],
    ids=lambda a: a if isinstance(a, str) else a[0],
)
def test_an_output_below_a_regular_file_is_a_usage_error(runner, tmp_path, args, flag):
    file = tmp_path / "a file"
    file.write_text("keep me")
    _refused(runner, [a.format(file=file) for a in args], flag, "is a file, not a folder")
    assert file.read_text() == "keep me"


@pytest.mark.parametrize("command", ["render", "regress"])
def test_a_fifo_as_input_is_refused_at_once(runner, tmp_path, command):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    args = {
        "render": ["render", str(REPO / "templates"), "x", "--inputs", str(fifo)],
        "regress": ["regress", "--prompts", str(fifo), *VARIANT],
    }[command]
    if command == "render":  # the bundle must exist for render to reach its inputs
        bundle = tmp_path / "b"
        assert runner.invoke(app, ["compile-templates", args[1], "-o", str(bundle)]).exit_code == 0
        args = ["render", str(bundle), "code-completion", "--inputs", str(fifo)]
    _refused(runner, args, str(fifo), "not a regular file")
