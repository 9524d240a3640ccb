"""chunk over several repositories: one output, paths prefixed by each repository's name,
deduplication across repositories, a list file, names that must differ."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from copilot_cli.cli import app

REPO = Path(__file__).resolve().parents[2]


def _two(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "api", tmp_path / "web"
    shutil.copytree(REPO / "sample_data" / "repo" / "src", a)
    shutil.copytree(REPO / "sample_data" / "repo" / "client", b)
    shutil.copy(a / "kvstore" / "lru.py", b / "lru_copy.py")  # one file in both
    return a, b


def test_two_repositories_in_one_output(runner, tmp_path):
    a, b = _two(tmp_path)
    out = tmp_path / "all.jsonl"
    result = runner.invoke(app, ["chunk", str(a), str(b), "-o", str(out), "--json", "--no-cache"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0]["repositories"] == ["api", "web"] and "repository" not in lines[0]
    paths = {c["path"].split("/", 1)[0] for c in lines[1:]}
    assert paths == {"api", "web"}
    locations = {loc["path"] for c in lines[1:] for loc in c["locations"]}
    assert {"api/kvstore/lru.py", "web/lru_copy.py"} <= locations  # folded into shared chunks
    assert json.loads(result.stdout)["exact_duplicates_folded"] >= 1


def test_a_list_file_names_the_repositories(runner, tmp_path):
    a, b = _two(tmp_path)
    listing = tmp_path / "repos.txt"
    listing.write_text("# nightly set\napi\n\nweb\n")
    direct, listed = tmp_path / "direct.jsonl", tmp_path / "listed.jsonl"
    assert runner.invoke(app, ["chunk", str(a), str(b), "-o", str(direct)]).exit_code == 0
    result = runner.invoke(app, ["chunk", "--repos-from", str(listing), "-o", str(listed)])
    assert result.exit_code == 0, result.output
    assert listed.read_bytes() == direct.read_bytes()
    listing.write_text("api\nmissing\n")
    result = runner.invoke(app, ["chunk", "--repos-from", str(listing), "-o", str(listed)])
    assert result.exit_code == 2 and f"{listing}:2" in result.stderr


def test_two_repositories_with_one_name_are_refused(runner, tmp_path):
    (tmp_path / "x" / "app").mkdir(parents=True)
    (tmp_path / "y" / "app").mkdir(parents=True)
    args = [
        "chunk",
        str(tmp_path / "x" / "app"),
        str(tmp_path / "y" / "app"),
        "-o",
        str(tmp_path / "o"),
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "two repositories are named app" in result.stderr
    assert runner.invoke(app, ["chunk", "-o", str(tmp_path / "o")]).exit_code == 2
