"""`copilot-opt context`: one request, a batch, the overview, and bad input (exit 2, one line,
nothing written)."""

from __future__ import annotations

import json

import pytest

from copilot_cli.cli import app

from .conftest import SAMPLE


def _run(runner, chunked, *args):
    base = ["context", str(chunked["chunks"]), "--registry", str(chunked["registry"])]
    return runner.invoke(app, [*base, "--repo", str(SAMPLE), *args])


def test_one_request_with_a_template(runner, chunked, tmp_path):
    bundle = tmp_path / "bundle"
    from tests.context.conftest import REPO

    assert (
        runner.invoke(
            app, ["compile-templates", str(REPO / "templates"), "-o", str(bundle)]
        ).exit_code
        == 0
    )
    args = ["--file", "src/kvstore/server.py", "--cursor", "60:1", "--budget", "300"]
    args += ["--bundle", str(bundle), "--template", "code-completion"]
    out, again = tmp_path / "request.json", tmp_path / "again.json"
    result = _run(runner, chunked, *args, "-o", str(out))
    assert result.exit_code == 0, result.output
    request = json.loads(out.read_text())
    assert request["format"] == "copilot-opt.context" and request["tokens"] <= 300
    assert request["tokenizer_fingerprint"] and request["chunks_digest"]
    assert request["text"] in request["prompt"] and request["snippets"]
    assert all(s["reason"] for s in request["snippets"])
    _run(runner, chunked, *args, "-o", str(again))
    assert again.read_bytes() == out.read_bytes()


def test_a_batch_gives_one_line_per_request(runner, chunked, tmp_path):
    requests = tmp_path / "requests.jsonl"
    requests.write_text(
        json.dumps({"file": "src/kvstore/server.py", "cursor": "60"})
        + "\n"
        + json.dumps({"file": "worker/main.go", "prefix": "c := &Compactor{", "budget": 200})
        + "\n"
    )
    out = tmp_path / "out.jsonl"
    result = _run(runner, chunked, "--requests", str(requests), "-o", str(out))
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["file"] for x in lines] == ["src/kvstore/server.py", "worker/main.go"]
    assert lines[1]["tokens"] <= 200 and lines[1]["budget"] == 200
    defined = [s for s in lines[1]["snippets"] if s["path"] == "worker/compactor.go"]
    assert defined and any("Compactor" in s["text"] for s in defined)


def test_static_overview_text(runner, chunked, tmp_path):
    out = tmp_path / "overview.txt"
    result = _run(runner, chunked, "--static", "--budget", "120", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_text().startswith("Repository overview")


@pytest.mark.parametrize(
    ("args", "where"),
    [
        (["--file", "src/nope.py", "--cursor", "3"], "src/nope.py"),
        (["--file", "src/kvstore/server.py", "--cursor", "9999"], "cursor"),
        (["--file", "src/kvstore/server.py", "--cursor", "3:500"], "cursor"),
        (["--file", "src/kvstore/server.py", "--cursor", "x"], "cursor"),
        (["--file", "src/kvstore/server.py", "--cursor", "3", "--budget", "3"], "budget"),
        (["--file", "src/kvstore/server.py", "--cursor", "3", "--budget", "0"], "budget"),
        (["--file", "src/kvstore/server.py"], "--cursor"),
        (["--cursor", "3"], "--file"),
        (["--file", "a.py", "--cursor", "1", "--format", "yaml"], "format"),
        (["--file", "a.py", "--cursor", "1", "--unit", "words"], "unit"),
        (
            ["--file", "src/kvstore/server.py", "--cursor", "3", "--template", "code-completion"],
            "--template",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2(runner, chunked, tmp_path, args, where):
    out = tmp_path / "out.json"
    result = _run(runner, chunked, *args, "-o", str(out))
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and where in lines[0], result.stderr
    assert not out.exists()


def test_chunks_of_another_tokenizer_are_refused(runner, chunked, tmp_path):
    from transformers import AutoTokenizer

    from copilot_cli.core.models import SHIPPED_MODEL

    other = AutoTokenizer.from_pretrained(SHIPPED_MODEL)
    other.add_tokens(["<|another_token|>"])
    other.save_pretrained(tmp_path / "other")
    args = [
        "--file",
        "src/kvstore/server.py",
        "--cursor",
        "3",
        "--tokenizer",
        str(tmp_path / "other"),
    ]
    result = _run(runner, chunked, *args)
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "chunks.jsonl" in result.stderr and "tokenizer" in result.stderr


def test_a_registry_of_other_chunks_is_refused(runner, chunked, tmp_path):
    edited = tmp_path / "chunks.jsonl"
    from copilot_cli.chunking import ChunkOptions, chunk_repository

    chunk_repository(ChunkOptions(repos=(SAMPLE,), out=edited, max_tokens=200, jobs=1))
    result = runner.invoke(
        app,
        [
            "context",
            str(edited),
            "--registry",
            str(chunked["registry"]),
            "--repo",
            str(SAMPLE),
            "--file",
            "src/kvstore/server.py",
            "--cursor",
            "3",
        ],
    )
    assert result.exit_code == 2 and "another chunks file" in result.stderr


def test_render_takes_a_context_result(runner, chunked, tmp_path):
    from tests.context.conftest import REPO

    bundle = tmp_path / "bundle"
    runner.invoke(app, ["compile-templates", str(REPO / "templates"), "-o", str(bundle)])
    request = tmp_path / "request.json"
    args = ["--file", "src/kvstore/server.py", "--cursor", "60:1", "--budget", "300"]
    assert _run(runner, chunked, *args, "-o", str(request)).exit_code == 0
    inputs = tmp_path / "inputs.json"
    inputs.write_text(json.dumps({"language": "python", "code_before": "x = "}))
    render = ["render", str(bundle), "code-completion", "-i", str(inputs)]
    plain = runner.invoke(app, render)
    with_context = runner.invoke(app, [*render, "--context", str(request)])
    assert plain.exit_code == 0 and with_context.exit_code == 0, with_context.output
    block = json.loads(request.read_text())["text"]
    assert block and block in with_context.stdout and block not in plain.stdout
    inputs.write_text("{}")
    bad = runner.invoke(app, [*render[:-1], str(request), "--context", str(inputs)])
    assert bad.exit_code == 2 and "not a result of copilot-opt context" in bad.stderr


@pytest.fixture()
def repo_with_a_way_out(tmp_path):
    """A copy of the sample repository with a secret beside it and symlinks leading to it."""
    import shutil

    repo = shutil.copytree(SAMPLE, tmp_path / "repo", symlinks=True)
    secret = tmp_path / "secret.txt"
    secret.write_text("TOKEN=hunter2\n")
    (repo / "src" / "leak.py").symlink_to(secret)
    (repo / "outside").symlink_to(tmp_path)
    return repo, secret


@pytest.mark.parametrize(
    "name",
    ["{secret}", "../secret.txt", "src/../../secret.txt", "src/leak.py", "outside/secret.txt"],
)
@pytest.mark.parametrize("how", ["flag", "env", "batch"])
def test_a_file_outside_the_repository_is_never_read(
    runner, chunked, tmp_path, repo_with_a_way_out, monkeypatch, name, how
):
    repo, secret = repo_with_a_way_out
    name = name.format(secret=secret)
    out = tmp_path / "out.json"
    base = ["context", str(chunked["chunks"]), "--registry", str(chunked["registry"])]
    base += ["--repo", str(repo), "-o", str(out)]
    if how == "flag":
        args = [*base, "--file", name, "--cursor", "1"]
    elif how == "env":
        monkeypatch.setenv("COPILOT_OPT_CONTEXT_FILE", name)
        args = [*base, "--cursor", "1"]
    else:
        requests = tmp_path / "requests.jsonl"
        requests.write_text(json.dumps({"file": name, "cursor": "1"}) + "\n")
        args = [*base, "--requests", str(requests)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and name in lines[0], result.stderr
    assert "hunter2" not in result.output and not out.exists()


def test_a_symlink_inside_the_repository_to_another_file_inside_is_followed(
    runner, chunked, tmp_path, repo_with_a_way_out
):
    repo, _ = repo_with_a_way_out
    (repo / "src" / "alias.py").symlink_to(repo / "src" / "kvstore" / "server.py")
    base = ["context", str(chunked["chunks"]), "--registry", str(chunked["registry"])]
    result = runner.invoke(
        app, [*base, "--repo", str(repo), "--file", "src/alias.py", "--cursor", "3", "--json"]
    )
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ({"file": "src/kvstore/server.py", "cursor": "3", "budget": "300"}, "budget: must be"),
        ({"file": "src/kvstore/server.py", "cursor": "3", "budget": True}, "budget: must be"),
        ({"file": "src/kvstore/server.py", "prefix": 42}, "prefix: must be a string"),
        ({"file": "src/kvstore/server.py", "prefix": "x", "suffix": ["y"]}, "suffix: must be"),
        ({"file": "src/kvstore/server.py", "cursor": [3]}, "cursor: must be LINE"),
        ({"file": "src/kvstore/server.py"}, "cursor: a cursor LINE[:COL] or a prefix"),
        ({"cursor": "3"}, "file: needs a 'file'"),
    ],
)
def test_a_bad_batch_line_is_refused_naming_the_request_and_field(
    runner, chunked, tmp_path, line, says
):
    """A batch line is a typed request, each field checked once: never coerced (a number is
    not a prefix), never a traceback."""
    requests = tmp_path / "requests.jsonl"
    good = {"file": "src/kvstore/server.py", "cursor": "60"}
    requests.write_text(json.dumps(good) + "\n" + json.dumps(line) + "\n")
    out = tmp_path / "out.jsonl"
    result = _run(runner, chunked, "--requests", str(requests), "-o", str(out))
    assert result.exit_code == 2, result.output
    assert f"request 2: {says}" in result.stderr and not out.exists()


def test_context_and_serve_fill_a_template_alike(tmp_path):
    """`context --bundle` and the serving endpoint build a template's inputs in one place: the
    language from the extension (tsx as typescript; a file of no known language gets the
    template's first), refused where the template does not take it."""
    from copilot_cli.core.errors import InputError
    from copilot_cli.prompts import CompileOptions, compile_templates, language_of, load_bundle
    from tests.context.conftest import REPO

    compile_templates(CompileOptions(REPO / "templates", tmp_path / "b"))
    bundle = load_bundle(tmp_path / "b")
    schema = bundle.entry("code-completion").schema
    assert language_of("web/app.tsx", schema, "code-completion") == "typescript"
    assert language_of("untitled", schema, "code-completion") == "python"
    assert language_of("notes.txt", {"properties": {"language": {}}}, "t") == "text"
    with pytest.raises(InputError, match="takes no go file"):
        language_of("main.go", {"properties": {"language": {"enum": ["python"]}}}, "t")
