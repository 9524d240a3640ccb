"""`--json` on stdout is exactly one JSON document (JSON Lines for a batch), for every command
that takes it: what `copilot-opt ... --json | jq .` needs. Progress, warnings and notes go to
stderr."""

from __future__ import annotations

import json
import shutil

import pytest

from copilot_cli.cli import app
from tests.conftest import REPO_ROOT

SAMPLE = REPO_ROOT / "sample_data" / "repo"


def _one_document(stdout: str) -> object:
    """The parsed document; fails if stdout holds anything before or after it."""
    decoder = json.JSONDecoder()
    value, end = decoder.raw_decode(stdout.lstrip())
    assert stdout.lstrip()[end:].strip() == "", f"more than one document: {stdout[:400]!r}"
    return value


def _json_lines(stdout: str) -> list[object]:
    lines = stdout.splitlines()
    assert lines, "no output"
    return [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def made(shipped_artifacts, tmp_path_factory):
    out, _ = shipped_artifacts
    root = tmp_path_factory.mktemp("json-stdout")
    (root / "prompt.txt").write_text("def add(a, b):\n    # add two numbers\n    return a + b\n")
    (root / "inputs.json").write_text(json.dumps({"code": "x = 1\n"}))
    (root / "requests.jsonl").write_text(
        json.dumps({"file": "src/kvstore/server.py", "cursor": "10"})
        + "\n"
        + json.dumps({"file": "worker/main.go", "prefix": "c := &Compactor{"})
        + "\n"
    )
    return out, root


def _commands(out, root):
    chunks = ["context", str(out / "chunks.jsonl"), "--registry", str(out / "registry.json")]
    chunks += ["--repo", str(SAMPLE)]
    return {
        "compile-templates": [
            "compile-templates",
            str(REPO_ROOT / "templates"),
            "-o",
            str(root / "bundle"),
        ],
        "render": [
            "render",
            str(out / "templates"),
            "docstring",
            "--inputs",
            str(root / "inputs.json"),
        ],
        "inspect": ["inspect", str(out / "kv")],
        "model-info": ["model-info"],
        "chunk": ["chunk", str(SAMPLE), "-o", str(root / "c.jsonl")],
        "context": [*chunks, "--file", "src/kvstore/server.py", "--cursor", "10"],
        "context --static": [*chunks, "--static", "--budget", "100"],
        "prune": ["prune", str(root / "prompt.txt"), "--rate", "0.5"],
        "quantize": ["quantize", "-o", str(root / "q"), "--no-fidelity"],
        "prefill-kv": [
            "prefill-kv",
            "--text",
            str(root / "prompt.txt"),
            "-o",
            str(root / "kv"),
        ],
    }


@pytest.mark.parametrize(
    "command",
    [
        "compile-templates",
        "render",
        "inspect",
        "model-info",
        "chunk",
        "context",
        "context --static",
        "prune",
        "quantize",
        "prefill-kv",
    ],
)
def test_json_on_stdout_is_one_document(runner, made, command):
    out, root = made
    result = runner.invoke(app, [*_commands(out, root)[command], "--json"])
    assert result.exit_code == 0, result.output
    assert isinstance(_one_document(result.stdout), dict)


def test_a_context_batch_is_json_lines(runner, made):
    out, root = made
    args = ["context", str(out / "chunks.jsonl"), "--registry", str(out / "registry.json")]
    args += ["--repo", str(SAMPLE), "--requests", str(root / "requests.jsonl"), "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = _json_lines(result.stdout)
    assert [line["file"] for line in lines] == ["src/kvstore/server.py", "worker/main.go"]


def test_warm_plan_json(runner, made, sessions_log, tmp_path):
    out, _ = made
    args = ["warm-plan", str(sessions_log), "--kv", str(out / "kv"), "-o", str(tmp_path / "p")]
    result = runner.invoke(app, [*args, "--budget", "900kB", "--json"])
    assert result.exit_code == 0, result.output
    assert isinstance(_one_document(result.stdout), dict)


def test_build_and_regress_json(runner, made, tmp_path):
    import yaml

    out, _ = made
    shutil.copytree(REPO_ROOT / "templates", tmp_path / "templates")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text((REPO_ROOT / "sample_data/prompts.jsonl").read_text().splitlines()[0] + "\n")
    config = {
        "templates": "templates",
        "repositories": [],
        "chunk": {"enabled": False},
        "quantize": {"enabled": False},
        "regress": {"enabled": False},
    }
    (tmp_path / "copilot-opt.yaml").write_text(yaml.safe_dump(config))
    args = ["build", "-c", str(tmp_path / "copilot-opt.yaml"), "-o", str(tmp_path / "b")]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    assert isinstance(_one_document(result.stdout), dict)
    args = ["regress", "--prompts", str(prompts), "-v", f"q8=quant={out / 'quant8'}"]
    result = runner.invoke(app, [*args, "--gen-tokens", "1", "--max-tokens", "32", "--json", "-"])
    assert result.exit_code in (0, 1), result.output
    assert isinstance(_one_document(result.stdout), dict)
