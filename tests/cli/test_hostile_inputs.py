"""Bad input, class by class, against every command it reaches: one line on stderr naming the
file or flag, exit 2, no traceback, nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from copilot_cli.cli import app
from copilot_cli.cli.common import MAX_MESSAGE

REPO = Path(__file__).resolve().parents[2]
PROMPTS = REPO / "sample_data" / "prompts.jsonl"
VARIANT = ["-v", "x=kv-dtype=int8"]


def _refused(runner, args: list[str], *expect: str):
    result = runner.invoke(app, args)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and len(lines) == 1, result.stderr
    assert len(lines[0]) <= MAX_MESSAGE + 20
    for text in expect:
        assert text in result.stderr, result.stderr
    return result


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    from typer.testing import CliRunner

    out = tmp_path_factory.mktemp("bundle") / "bundle"
    result = CliRunner().invoke(app, ["compile-templates", str(REPO / "templates"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


# -- text that is not UTF-8, or JSON nested past any sane depth ---------------------------------


@pytest.mark.parametrize("command", ["render", "quantize", "regress"])
def test_non_utf8_inputs_name_the_file_and_byte(runner, tmp_path, bundle, command):
    bad = tmp_path / "bad.jsonl"
    data = b'{"id": "a", "prompt": "ok \xff\xfe"}\n'
    bad.write_bytes(data)
    args = {
        "render": ["render", str(bundle), "code_review", "--inputs", str(bad)],
        "quantize": ["quantize", "-o", str(tmp_path / "q"), "--prompts", str(bad)],
        "regress": ["regress", "--prompts", str(bad), *VARIANT],
    }[command]
    offset = data.index(b"\xff")
    _refused(runner, args, str(bad), f"byte {offset} (0xff)")
    assert not (tmp_path / "q").exists()


def test_deeply_nested_render_inputs(runner, tmp_path, bundle):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    _refused(runner, ["render", str(bundle), "code_review", "--inputs", str(deep)], "nested")


# -- an output path that is a folder (or a folder that is a file) -----------------------------


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["chunk", str(REPO / "sample_data/repo"), "-o", "{dir}"], "--out"),
        (
            ["chunk", str(REPO / "sample_data/repo"), "-o", "{tmp}/c.jsonl", "--registry", "{dir}"],
            "--registry",
        ),
        (["prune", str(REPO / "README.md"), "--rate", "0.5", "-o", "{dir}"], "--out"),
        (["regress", "--prompts", str(PROMPTS), *VARIANT, "--json", "{dir}"], "--json"),
        (["regress", "--prompts", str(PROMPTS), *VARIANT, "--junit", "{dir}"], "--junit"),
        (["regress", "--prompts", str(PROMPTS), *VARIANT, "--markdown", "{dir}"], "--markdown"),
        (["regress", "--prompts", str(PROMPTS), *VARIANT, "--html", "{dir}"], "--html"),
        (["prefill-kv", "-o", "{tmp}/kv", "--text", "{dir}"], "--text"),
        (["build", "-o", "{file}"], "--out"),
        (["quantize", "-o", "{file}"], "not a folder"),
    ],
)
def test_output_paths_of_the_wrong_kind(runner, tmp_path, args, flag):
    folder = tmp_path / "a folder"
    folder.mkdir()
    file = tmp_path / "a file"
    file.write_text("keep me")
    fill = {"dir": str(folder), "file": str(file), "tmp": str(tmp_path)}
    _refused(runner, [a.format(**fill) for a in args], flag)
    assert file.read_text() == "keep me" and list(folder.iterdir()) == []
    assert not (tmp_path / "c.jsonl").exists()  # nothing written before the refusal


def test_quantize_refuses_to_replace_a_folder_holding_other_files(runner, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    _refused(runner, ["quantize", "-o", str(tmp_path), "--no-fidelity"], "notes.txt")
    assert (tmp_path / "notes.txt").read_text() == "mine"


# -- a model folder whose config.json is not an object -----------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["quantize", "-o", "{tmp}/q"],
        ["prune", str(REPO / "README.md"), "--rate", "0.5"],
        ["prefill-kv", "-o", "{tmp}/kv", "--text", str(REPO / "README.md")],
        ["model-info"],
    ],
    ids=lambda a: a[0],
)
def test_config_json_that_is_an_array(runner, tmp_path, shipped_model_dir, args):
    model = Path(shutil.copytree(shipped_model_dir, tmp_path / "model"))
    (model / "config.json").write_text("[1, 2]")
    args = [a.format(tmp=tmp_path) for a in args]
    _refused(
        runner, [*args, "--model", str(model)], str(model), "config.json must be a JSON object"
    )


# -- user text that looks like rich markup ---------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["inspect", "{p}"],
        ["model-info", "--model", "{p}"],
        ["regress", "--prompts", "{p}", *VARIANT],
        ["render", "{p}", "x", "--inputs", "{p}"],
        ["chunk", "{p}"],
    ],
    ids=lambda a: a[0],
)
def test_markup_in_paths_is_printed_as_text(runner, tmp_path, args):
    path = str(tmp_path / "x[/]y[bold]z")
    result = _refused(runner, [a.format(p=path) for a in args])
    assert path in result.stderr


def test_markup_in_names_of_a_working_run_is_printed_as_text(runner, tmp_path):
    templates = tmp_path / "t[/]s"
    templates.mkdir(parents=True)
    (templates / "[red]greet[bold].j2").write_text(
        "---\nname: greet\ndescription: '[red]hello[/red]'\nversion: 1.0.0\n"
        "inputs:\n  type: object\n  properties:\n    name: {type: string}\n"
        "---\nSay hello to {{ name }}.\n"
    )
    bundle = tmp_path / "b[/]"
    result = runner.invoke(app, ["compile-templates", str(templates), "-o", str(bundle)])
    assert result.exit_code == 0, result.output
    inputs = tmp_path / "in.json"
    inputs.write_text(json.dumps({"name": "[/][bold]x"}))
    result = runner.invoke(app, ["render", str(bundle), "greet", "--inputs", str(inputs)])
    assert result.exit_code == 0, result.output
    assert "Say hello to [/][bold]x." in result.stdout
    inspected = runner.invoke(app, ["inspect", str(bundle)])
    assert inspected.exit_code == 0 and "b[/]" in inspected.stdout.replace("\n", "")
    # a markup name is no template name (names become file names): refused, printed as text
    (templates / "[red]greet[bold].j2").write_text(
        "---\nname: '[red]greet[/red]'\ndescription: d\nversion: 1.0.0\n"
        "inputs:\n  type: object\n---\nx\n"
    )
    refused = runner.invoke(app, ["compile-templates", str(templates), "-o", str(bundle)])
    assert refused.exit_code == 2 and "'[red]greet[/red]' is not a template name" in (
        refused.stderr
    )


# -- prompts files -------------------------------------------------------------------------------

GOOD = [json.loads(line) for line in PROMPTS.read_text().splitlines()[:2]]


@pytest.mark.parametrize(
    ("rows", "expect"),
    [
        ([{**GOOD[0], "id": [1]}], ':1: "id" must be'),
        ([{**GOOD[0], "id": None}], ':1: "id" must be'),
        ([{**GOOD[0], "task": [1]}], ':1: "task" must be'),
        ([{**GOOD[0], "prompt": "  \n\t "}], ':1: "prompt" must be a string with text'),
        ([{**GOOD[0], "prompt": "x"}], "nothing to score"),
        ([GOOD[0], {**GOOD[1], "id": GOOD[0]["id"]}], ":2: id"),
        ([[1, 2]], ":1:"),
    ],
    ids=["id-list", "id-null", "task-list", "blank", "one-token", "duplicate-id", "not-object"],
)
@pytest.mark.parametrize("command", ["regress", "quantize"])
def test_malformed_prompt_sets(runner, tmp_path, rows, expect, command):
    if command == "quantize" and expect == "nothing to score":
        pytest.skip("quantize scores the whole prompt set, one-token prompts included")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(row) + "\n" for row in rows))
    args = (
        ["regress", "--prompts", str(prompts), *VARIANT]
        if command == "regress"
        else ["quantize", "-o", str(tmp_path / "q"), "--prompts", str(prompts)]
    )
    _refused(runner, args, str(prompts), expect)


# -- YAML ----------------------------------------------------------------------------------


def test_yaml_alias_bomb_is_refused_quickly_with_a_short_message(runner, tmp_path):
    rows = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        rows.append(f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]")
    config = tmp_path / "bomb.yaml"
    config.write_text("\n".join(rows) + "\n")
    _refused(runner, ["build", "-c", str(config), "-o", str(tmp_path / "b")], "YAML aliases")
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("command", ["build", "regress"])
def test_yaml_duplicate_keys_name_both_lines(runner, tmp_path, command):
    config = tmp_path / "c.yaml"
    config.write_text(
        "gen_tokens: 4\nmax_tokens: 64\ngen_tokens: 8\n"
        if command == "regress"
        else "device: cpu\nmodel: null\ndevice: cpu\n"
    )
    args = (
        ["regress", "-c", str(config), "--prompts", str(PROMPTS), *VARIANT]
        if command == "regress"
        else ["build", "-c", str(config), "-o", str(tmp_path / "b")]
    )
    _refused(runner, args, f"{config}:3:", "given twice (also on line 1)")


# -- counts bounded by what the machine and the model can do ---------------------------------


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (
            ["chunk", str(REPO / "sample_data/repo"), "-o", "{tmp}/c.jsonl", "--jobs", "1000000"],
            "--jobs",
        ),
        (
            ["regress", "--prompts", str(PROMPTS), *VARIANT, "--gen-tokens", str(10**12)],
            "--gen-tokens",
        ),
        (
            [
                "regress",
                "--prompts",
                str(PROMPTS),
                "--save-baseline",
                "{tmp}/b",
                "--baseline-topk",
                str(10**12),
            ],
            "vocabulary",
        ),
        (
            [
                "prefill-kv",
                "-o",
                "{tmp}/kv",
                "--text",
                str(REPO / "README.md"),
                "--block-size",
                str(10**12),
            ],
            "--block-size",
        ),
        (
            [
                "compile-templates",
                str(REPO / "templates"),
                "-o",
                "{tmp}/b",
                "--min-prefix-tokens",
                "-5",
            ],
            "--min-prefix-tokens",
        ),
        (["prune", str(REPO / "README.md"), "--threshold", "2"], "--threshold"),
        (["regress", "--prompts", str(PROMPTS), *VARIANT, "--max-mean-kl", "nan"], "finite"),
        (
            ["regress", "--prompts", str(PROMPTS), *VARIANT, "--min-same-top1", "1.5"],
            "outside [0, 1]",
        ),
    ],
    ids=[
        "jobs",
        "gen-tokens",
        "baseline-topk",
        "block-size",
        "min-prefix",
        "threshold",
        "nan",
        "top1",
    ],
)
def test_counts_and_thresholds_out_of_bounds(runner, tmp_path, args, expect):
    _refused(runner, [a.format(tmp=tmp_path) for a in args], expect)
    assert not any(tmp_path.iterdir())


# -- a KV index of the wrong shape, reached through regress -------------------------------


def test_kv_index_with_prefixes_of_the_wrong_type(runner, tmp_path, shipped_artifacts):
    out, _ = shipped_artifacts
    kv = Path(shutil.copytree(out / "kv", tmp_path / "kv"))
    index = json.loads((kv / "index.json").read_text())
    index["prefixes"] = [1]
    (kv / "index.json").write_text(json.dumps(index))
    _refused(runner, ["regress", "--prompts", str(PROMPTS), "-v", f"x=kv={kv}"], "index.json")


# -- Ray asked for where it is not installed ----------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["chunk", str(REPO / "sample_data/repo"), "-o", "{tmp}/c.jsonl", "--ray", "local"],
        ["regress", "--prompts", str(PROMPTS), *VARIANT, "--ray", "auto"],
        [
            "prefill-kv",
            "-o",
            "{tmp}/kv",
            "--text",
            str(REPO / "templates/bug_fix.j2"),
            "--ray",
            "local",
        ],
    ],
    ids=lambda a: a[0],
)
def test_ray_without_the_extra_is_one_line(runner, tmp_path, args):
    pytest.importorskip("torch")
    try:
        import ray  # noqa: F401

        pytest.skip("Ray is installed in this environment")
    except ImportError:
        pass
    _refused(runner, [a.format(tmp=tmp_path) for a in args], "--ray", 'pip install -e ".[ray]"')


def test_a_ray_address_that_is_not_one(runner, tmp_path):
    args = ["chunk", str(REPO / "sample_data/repo"), "-o", str(tmp_path / "c"), "--ray", "no such"]
    _refused(runner, args, "--ray", "is not local, auto")


@pytest.mark.parametrize("where", ["file", "below-a-file", "uncreatable"])
def test_an_unusable_cache_dir_is_exit_2_before_anything_is_written(
    runner, tmp_path, monkeypatch, where
):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    cache = {"file": a_file, "below-a-file": a_file / "sub", "uncreatable": "/proc/copilot"}
    monkeypatch.setenv("COPILOT_OPT_CACHE_DIR", str(cache[where]))
    out = tmp_path / "pruned.txt"
    source = tmp_path / "in.py"
    source.write_text("def f(x):\n    return x + 1\n")
    result = runner.invoke(app, ["prune", str(source), "-o", str(out), "--rate", "0.5"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "COPILOT_OPT_CACHE_DIR" in lines[0]
    assert not out.exists()


@pytest.mark.parametrize("repo", ["/", "/proc", "/sys/kernel"])
def test_the_filesystem_root_or_a_kernel_folder_is_no_repository(runner, tmp_path, repo):
    import yaml

    out = tmp_path / "c.jsonl"
    result = runner.invoke(app, ["chunk", repo, "-o", str(out)])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()
    config = tmp_path / "copilot-opt.yaml"
    shutil.copytree(Path(__file__).resolve().parents[2] / "templates", tmp_path / "templates")
    config.write_text(yaml.safe_dump({"repositories": [repo]}))
    built = runner.invoke(app, ["build", "-c", str(config), "-o", str(tmp_path / "b")])
    assert built.exit_code == 2 and "repositories[0]" in built.stderr, built.output
