import json
from pathlib import Path

from copilot_cli.cli import app

REPO = Path(__file__).resolve().parents[2]


def test_compile_prefill_verify_inspect(runner, tmp_path):
    bundle, kv = tmp_path / "bundle", tmp_path / "kv"
    assert (
        runner.invoke(
            app, ["compile-templates", str(REPO / "templates"), "-o", str(bundle)]
        ).exit_code
        == 0
    )
    result = runner.invoke(app, ["prefill-kv", str(bundle), "-o", str(kv), "--verify", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert len(report["prefixes"]) >= 6
    assert report["distinct_tokens"] < report["sum_prefix_tokens"]
    assert all(v["passed"] and v["max_abs_diff"] < 1e-4 for v in report["verify"])

    result = runner.invoke(app, ["inspect", str(kv), "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["kind"] == "kv-folder" and info["block_size"] == 16
    segment = next((kv / "segments").glob("*.safetensors"))
    info = json.loads(runner.invoke(app, ["inspect", str(segment), "--json"]).stdout)
    assert info["kind"] == "kv-segment" and info["format"] == "copilot-opt.kv-segment"
    assert runner.invoke(app, ["inspect", str(kv)]).exit_code == 0


def test_text_prefixes_and_bad_input(runner, tmp_path):
    text = tmp_path / "system.txt"
    text.write_text("You are a helpful code assistant.\n" * 4)
    kv = tmp_path / "kv"
    result = runner.invoke(
        app,
        [
            "prefill-kv",
            "--text",
            str(text),
            "-o",
            str(kv),
            "--json",
            "--dtype",
            "bfloat16",
            "--verify",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["verify"][0]["passed"]

    too_long = tmp_path / "long.txt"
    too_long.write_text("token " * 5000)
    result = runner.invoke(app, ["prefill-kv", "--text", str(too_long), "-o", str(tmp_path / "x")])
    assert result.exit_code == 2 and "context" in result.stderr
    result = runner.invoke(app, ["prefill-kv", "-o", str(tmp_path / "x")])
    assert result.exit_code == 2 and "BUNDLE" in result.stderr
    result = runner.invoke(app, ["prefill-kv", "--text", str(tmp_path / "none.txt")])
    assert result.exit_code == 2 and "none.txt" in result.stderr
    result = runner.invoke(app, ["inspect", str(tmp_path / "nothing")])
    assert result.exit_code == 2
