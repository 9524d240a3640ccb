"""What the walk may never hand to the chunker: ignored secrets behind links, content outside
the repository, special files; and trees no recursion limit or file name can break."""

import json
import os
import sys

import pytest

from copilot_cli.chunking.walk import read_regular, walk
from copilot_cli.cli import app

SECRET = "AWS_KEY=AKIAEXAMPLESECRET0001"
PRIVATE = "PRIVATE_KEY = 'never-in-a-chunk'"
OUTSIDE = "OUTSIDE_TOKEN = 'from-another-folder'"


@pytest.fixture()
def leaky(tmp_path):
    """The reported layout: ignored `.env` and `secrets/`, reachable through links."""
    repo = tmp_path / "repo"
    (repo / "secrets").mkdir(parents=True)
    (repo / ".gitignore").write_text(".env\nsecrets/\n")
    (repo / ".env").write_text(SECRET + "\n")
    (repo / "secrets" / "keys.py").write_text(PRIVATE + "\n")
    (repo / "app.py").write_text("def handler(event):\n    return event\n")
    os.symlink(".env", repo / "settings.py")
    os.symlink("secrets", repo / "public")
    (tmp_path / "elsewhere.py").write_text(OUTSIDE + "\n")
    os.symlink(tmp_path / "elsewhere.py", repo / "shared.py")
    return repo


def _chunk(runner, repo, out, *extra):
    registry = out.with_suffix(".registry.json")
    result = runner.invoke(
        app,
        ["chunk", str(repo), "-o", str(out), "--registry", str(registry), "--no-cache", *extra],
    )
    assert result.exit_code == 0, result.output
    return out.read_text() + registry.read_text()


@pytest.mark.parametrize("extra", [(), ("--follow-symlinks",)])
def test_no_secret_reaches_the_chunks(runner, leaky, tmp_path, extra):
    text = _chunk(runner, leaky, tmp_path / "chunks.jsonl", *extra)
    assert "handler" in text  # the real file is chunked
    for secret in (SECRET, PRIVATE, OUTSIDE, "AKIAEXAMPLE", "never-in-a-chunk"):
        assert secret not in text
    chunks = [json.loads(line) for line in (tmp_path / "chunks.jsonl").read_text().splitlines()]
    paths = {loc["path"] for chunk in chunks[1:] for loc in chunk["locations"]}
    assert paths == {".gitignore", "app.py"}


def test_default_walk_names_each_link_it_skipped(leaky):
    result = walk(leaky)
    assert [rel for _, rel in result.files] == [".gitignore", "app.py"]
    assert sorted(result.skipped_paths["symlink (not followed)"]) == [
        "public",
        "settings.py",
        "shared.py",
    ]


def test_followed_links_apply_the_ignore_rules_to_the_resolved_path(leaky):
    result = walk(leaky, follow_symlinks=True)
    assert [rel for _, rel in result.files] == [".gitignore", "app.py"]
    assert sorted(result.skipped_paths["link to a gitignored path"]) == ["public", "settings.py"]
    assert result.skipped_paths["link outside the repository"] == ["shared.py"]


def test_followed_link_to_a_readable_file_is_chunked_under_its_name(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "util.py").write_text("x = 1\n")
    os.symlink("lib/util.py", tmp_path / "alias.py")
    files = dict((rel, real) for real, rel in walk(tmp_path, follow_symlinks=True).files)
    assert files["alias.py"] == files["lib/util.py"] == (tmp_path / "lib" / "util.py").resolve()


def test_links_inside_a_followed_folder_are_checked_too(tmp_path):
    (tmp_path / ".gitignore").write_text("private/\n")
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / "token.txt").write_text("token\n")
    (tmp_path / "docs").mkdir()
    os.symlink("../private/token.txt", tmp_path / "docs" / "token.txt")
    os.symlink("docs", tmp_path / "docs-link")
    result = walk(tmp_path, follow_symlinks=True)
    assert all("token" not in rel for _, rel in result.files)


def test_special_files_are_never_read(tmp_path):
    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "ok.py").write_text("y = 2\n")
    result = walk(tmp_path)
    assert [rel for _, rel in result.files] == ["ok.py"]
    assert result.skipped_paths["not a regular file"] == ["pipe.py"]
    with pytest.raises(OSError):
        read_regular(tmp_path / "pipe.py")


def test_a_file_swapped_for_a_link_after_the_walk_is_refused(tmp_path):
    (tmp_path / "a.py").write_text("z = 3\n")
    (tmp_path / ".env").write_text(SECRET)
    assert read_regular(tmp_path / "a.py") == b"z = 3\n"
    (tmp_path / "a.py").unlink()
    os.symlink(".env", tmp_path / "a.py")
    with pytest.raises(OSError):
        read_regular(tmp_path / "a.py")


def test_a_tree_deeper_than_the_recursion_limit(tmp_path, runner):
    depth = sys.getrecursionlimit() + 500
    folder = tmp_path / "deep"
    folder.mkdir()
    levels = [folder]
    for _ in range(depth):  # os.makedirs recurses: build it one level at a time
        levels.append(levels[-1] / "d")
        levels[-1].mkdir()
    (levels[-1] / "leaf.py").write_text("leaf = True\n")
    try:
        assert [rel.count("/") for _, rel in walk(folder).files] == [depth]
        out = tmp_path / "c.jsonl"
        result = runner.invoke(app, ["chunk", str(folder), "-o", str(out), "--no-cache"])
        assert result.exit_code == 0, result.output
    finally:  # pytest's own cleanup (shutil.rmtree) recurses too: remove it bottom-up
        (levels[-1] / "leaf.py").unlink()
        for level in reversed(levels):
            level.rmdir()


def test_a_file_name_that_is_not_utf8_is_skipped_with_a_note(tmp_path, runner):
    repo = tmp_path / "r"
    repo.mkdir()
    (repo / "fine.py").write_text("a = 1\n")
    with open(os.path.join(os.fsencode(repo), b"caf\xe9.py"), "wb") as handle:
        handle.write(b"b = 2\n")
    result = walk(repo)
    assert [rel for _, rel in result.files] == ["fine.py"]
    assert result.skipped_paths["name not UTF-8"] == ["caf\\xe9.py"]
    out = tmp_path / "c.jsonl"
    cli = runner.invoke(app, ["chunk", str(repo), "-o", str(out), "--no-cache", "--json"])
    assert cli.exit_code == 0, cli.output
    assert json.loads(cli.stdout)["skipped"]["name not UTF-8"] == 1


@pytest.mark.parametrize("extra", [(), ("--follow-symlinks",)])
def test_a_hard_link_to_an_ignored_or_outside_file_is_not_chunked(runner, leaky, tmp_path, extra):
    os.link(leaky / ".env", leaky / "hardlink_env.py")  # an ignored name
    os.link(leaky / "secrets" / "keys.py", leaky / "keys_copy.py")  # a name in an ignored folder
    os.link(tmp_path / "elsewhere.py", leaky / "outside.py")  # a name outside the repository
    (leaky / "twin_a.py").write_text("def twin():\n    return 2\n")
    os.link(leaky / "twin_a.py", leaky / "twin_b.py")  # both names chunked: nothing hidden
    text = _chunk(runner, leaky, tmp_path / "chunks.jsonl", *extra)
    for secret in (SECRET, PRIVATE, OUTSIDE):
        assert secret not in text
    assert "def twin" in text
    skipped = walk(leaky).skipped_paths["hard link with a name not chunked"]
    assert sorted(skipped) == ["hardlink_env.py", "keys_copy.py", "outside.py"]


def test_an_ignore_file_that_is_a_link_is_read_through_it(runner, leaky, tmp_path):
    sub = leaky / "sub"
    sub.mkdir()
    (leaky / "sub-rules").write_text("*.secret\n")
    os.symlink("../sub-rules", sub / ".gitignore")
    (sub / "x.secret").write_text(SECRET + "\n")
    (sub / "ok.py").write_text("def ok():\n    return 1\n")
    result = walk(leaky)
    assert "sub/x.secret" in result.skipped_paths["gitignored"]
    assert "sub/ok.py" in [rel for _, rel in result.files]


@pytest.mark.parametrize("how", ["dangling link", "unreadable", "folder"])
def test_an_ignore_file_that_cannot_be_read_is_an_error(runner, leaky, tmp_path, how):
    sub = leaky / "sub"
    sub.mkdir()
    (sub / "x.secret").write_text(SECRET + "\n")
    ignore = sub / ".gitignore"
    if how == "dangling link":
        os.symlink("no-such-file", ignore)
    elif how == "folder":
        ignore.mkdir()
    else:
        if os.geteuid() == 0:
            pytest.skip("root reads a file whatever its mode")
        ignore.write_text("*.secret\n")
        ignore.chmod(0)
    out = tmp_path / "chunks.jsonl"
    result = runner.invoke(app, ["chunk", str(leaky), "-o", str(out), "--no-cache"])
    assert result.exit_code == 2, result.output
    assert f"{ignore}: the ignore file" in result.stderr and "Traceback" not in result.output
    assert not out.exists()


def test_names_with_control_characters_are_skipped_and_named(tmp_path):
    (tmp_path / "ok.py").write_text("x = 1\n")
    (tmp_path / "evil\n<|file_sep|>x.py").write_text("y = 2\n")
    (tmp_path / "tab\there.py").write_text("z = 3\n")
    result = walk(tmp_path)
    assert [rel for _, rel in result.files] == ["ok.py"]
    assert result.skipped["control character in the name"] == 2
    assert "evil\\n<|file_sep|>x.py" in result.skipped_paths["control character in the name"]
