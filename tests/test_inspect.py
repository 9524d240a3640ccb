"""inspect: every kind of artifact described and verified; damaged ones exit 1 naming each
bad file; --no-verify only describes; --model checks what it was made for."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from copilot_cli.cli import app

KINDS = {
    "templates": "prompt-bundle",
    "kv": "kv-folder",
    "quant8": "quantized-embeddings",
    "quant4": "quantized-embeddings",
    "chunks.jsonl": "chunks",
    "registry.json": "chunk-registry",
    "baseline.safetensors": "regress-baseline",
}


def _copy(src: Path, dst: Path) -> Path:
    if src.is_dir():
        return Path(shutil.copytree(src, dst))
    shutil.copy(src, dst)
    return dst


def _flip(path: Path, at: float = 0.75) -> None:
    data = bytearray(path.read_bytes())
    data[int(len(data) * at)] ^= 0x01
    path.write_bytes(bytes(data))


def _inspect(runner, *args: str):
    result = runner.invoke(app, ["inspect", *args, "--json"])
    assert "Traceback" not in result.output
    return result, (json.loads(result.stdout) if result.stdout.strip() else None)


@pytest.mark.parametrize("name", sorted(KINDS))
def test_each_healthy_artifact_is_described_and_verified(runner, shipped_artifacts, name):
    out, _ = shipped_artifacts
    result, info = _inspect(runner, str(out / name))
    assert result.exit_code == 0, result.output
    assert info["kind"] == KINDS[name] and info["verified"] is True and info["problems"] == []


def _victim(root: Path, name: str) -> Path:
    """The file inside artifact `name` whose bytes the test damages."""
    if name == "kv":
        return sorted((root / "segments").iterdir())[0]
    if name == "templates":
        return sorted((root / "sources").iterdir())[0]
    if name.startswith("quant"):
        return root / "embeddings.safetensors"
    return root


@pytest.mark.parametrize("name", sorted(KINDS))
def test_one_flipped_byte_exits_1_naming_the_file(runner, shipped_artifacts, tmp_path, name):
    out, _ = shipped_artifacts
    copy = _copy(out / name, tmp_path / name)
    victim = _victim(copy, name)
    _flip(victim)
    result, info = _inspect(runner, str(copy))
    assert result.exit_code == 1, result.output
    bad = [p["file"] for p in info["problems"]]
    assert str(victim) in bad or (name == "templates" and bad), info["problems"]
    assert f"bad: {bad[0]}" in result.stderr and "verification failed" in result.stderr
    described, _ = _inspect(runner, str(copy), "--no-verify")
    assert described.exit_code == 0, described.output


def test_kv_folder_lists_every_bad_segment_not_only_the_first(runner, shipped_artifacts, tmp_path):
    out, _ = shipped_artifacts
    copy = _copy(out / "kv", tmp_path / "kv")
    segments = sorted((copy / "segments").iterdir())[:3]
    for segment in segments:
        _flip(segment, 0.5)
    result, info = _inspect(runner, str(copy))
    assert result.exit_code == 1
    assert sorted(p["file"] for p in info["problems"]) == sorted(map(str, segments))


def test_kv_segment_that_is_consistent_but_not_the_one_indexed_is_caught(
    runner, shipped_artifacts, tmp_path
):
    out, _ = shipped_artifacts
    copy = _copy(out / "kv", tmp_path / "kv")
    index = json.loads((copy / "index.json").read_text())
    first, second = sorted(index["segments"])[:2]
    # a valid segment file under another segment's name: each file is intact on its own
    shutil.copy(copy / index["segments"][second]["file"], copy / index["segments"][first]["file"])
    result, info = _inspect(runner, str(copy))
    assert result.exit_code == 1
    assert any(index["segments"][first]["file"] in p["file"] for p in info["problems"])


def test_edited_index_is_a_problem_and_segments_are_still_checked(
    runner, shipped_artifacts, tmp_path
):
    out, _ = shipped_artifacts
    copy = _copy(out / "kv", tmp_path / "kv")
    index = json.loads((copy / "index.json").read_text())
    index["prefixes"] = [1]
    (copy / "index.json").write_text(json.dumps(index))
    segment = sorted((copy / "segments").iterdir())[0]
    _flip(segment)
    result, info = _inspect(runner, str(copy))
    assert result.exit_code == 1
    assert {p["file"] for p in info["problems"]} == {str(copy / "index.json"), str(segment)}
    quick = runner.invoke(app, ["inspect", str(copy), "--no-verify"])
    assert quick.exit_code == 2 and "index.json" in quick.stderr  # cannot even be described


def test_model_given_checks_what_the_artifacts_were_made_for(
    runner, shipped_artifacts, shipped_model_dir, tiny_llama_dir
):
    out, _ = shipped_artifacts
    for name in ("kv", "quant8", "baseline.safetensors"):
        same, _ = _inspect(runner, str(out / name), "--model", str(shipped_model_dir))
        assert same.exit_code == 0, same.output
        other, info = _inspect(runner, str(out / name), "--model", str(tiny_llama_dir))
        assert other.exit_code == 1, other.output
        assert any("made for model" in p["problem"] for p in info["problems"]), info["problems"]


def test_quantized_folder_whose_report_describes_another_table(runner, shipped_artifacts, tmp_path):
    out, _ = shipped_artifacts
    copy = _copy(out / "quant8", tmp_path / "q")
    # the half-replaced folder of a failed run in older versions: INT4 table, INT8 report
    shutil.copy(out / "quant4" / "embeddings.safetensors", copy / "embeddings.safetensors")
    report = {"bits": 8, "vocab_size": 1, "hidden_size": 1, "kept_rows": 1}
    (copy / "report.json").write_text(json.dumps(report))
    result, info = _inspect(runner, str(copy))
    assert result.exit_code == 1
    assert [p["file"] for p in info["problems"]] == [str(copy / "report.json")]


def test_registry_of_another_chunks_file(runner, shipped_artifacts, tmp_path):
    out, _ = shipped_artifacts
    shutil.copy(out / "registry.json", tmp_path / "repo.registry.json")
    lines = (out / "chunks.jsonl").read_text().splitlines(True)
    (tmp_path / "repo.jsonl").write_text(lines[0] + "".join(lines[1:]))
    result, _ = _inspect(runner, str(tmp_path / "repo.registry.json"))
    assert result.exit_code == 0, result.output  # the pair as written
    header = json.loads(lines[0])
    header["max_tokens"] += 1  # a different chunks file: its own digest updated to match
    from copilot_cli.chunking.format import chunks_digest

    body = [line.encode() for line in lines[1:]]
    header["digest"] = chunks_digest(header, body)
    (tmp_path / "repo.jsonl").write_text(
        json.dumps(header, sort_keys=True) + "\n" + "".join(lines[1:])
    )
    result, info = _inspect(runner, str(tmp_path / "repo.registry.json"))
    assert result.exit_code == 1
    assert "another chunks file" in info["problems"][0]["problem"]


def test_build_folder_verifies_everything_in_it(runner, tmp_path, shipped_artifacts):
    out, _ = shipped_artifacts
    build = tmp_path / "build"
    _copy(out / "templates", build / "templates")
    _copy(out / "kv", build / "kv")
    _copy(out / "quant8", build / "quant")
    (build / "chunks").mkdir()
    _copy(out / "chunks.jsonl", build / "chunks" / "repo.jsonl")
    from copilot_cli.core.artifacts import canonical_json, sealed

    manifest = {"format": "copilot-opt.build-manifest", "format_version": 3, "steps": {}}
    (build / "build-manifest.json").write_text(
        canonical_json(sealed({**manifest, "verdict": None}))
    )
    result, info = _inspect(runner, str(build))
    assert result.exit_code == 0, result.output
    assert [p["kind"] for p in info["parts"]] == [
        "prompt-bundle",
        "kv-folder",
        "quantized-embeddings",
        "chunks",
    ]
    _flip(build / "quant" / "embeddings.safetensors")
    (build / "build-manifest.json").write_text(canonical_json({**manifest, "verdict": "pass"}))
    result, info = _inspect(runner, str(build))
    assert result.exit_code == 1
    bad = {
        p["file"]
        for p in [*info["problems"], *(q for part in info["parts"] for q in part["problems"])]
    }
    assert bad == {
        str(build / "build-manifest.json"),
        str(build / "quant" / "embeddings.safetensors"),
    }


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda tmp: tmp / "missing", "does not exist"),
        (lambda tmp: tmp, "not a copilot-opt artifact folder"),
        (lambda tmp: (tmp / "x.txt").write_text("hi") and tmp / "x.txt", "not a copilot-opt"),
    ],
)
def test_what_is_no_artifact_is_exit_2(runner, tmp_path, make, reason):
    result = runner.invoke(app, ["inspect", str(make(tmp_path))])
    assert result.exit_code == 2 and reason in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("name", ["quant8", "baseline.safetensors"])
@pytest.mark.parametrize("damage", ["truncate", "garble-header"])
def test_a_table_too_damaged_to_describe_is_a_bad_line_not_an_error(
    runner, shipped_artifacts, tmp_path, name, damage
):
    out, _ = shipped_artifacts
    root = _copy(out / name, tmp_path / name)
    file = root / "embeddings.safetensors" if root.is_dir() else root
    data = bytearray(file.read_bytes())
    if damage == "truncate":
        del data[len(data) // 2 :]
    else:
        data[10:40] = b"x" * 30  # inside the JSON header
    file.write_bytes(bytes(data))
    for target in {root, file}:
        result, _ = _inspect(runner, str(target))
        assert result.exit_code == 1, result.output
        assert f"bad: {file}" in result.stderr
    no_verify = runner.invoke(app, ["inspect", "--no-verify", str(file)])
    assert no_verify.exit_code == 2 and "Traceback" not in no_verify.output
