"""Artifacts edited and resealed (their digests recomputed, as anyone can): the readers bound
what they read before trusting it. Each case is refused with one line (exit 1 from inspect with
a `bad:` line, exit 2 from a consumer), never a crash or a hang."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

from copilot_cli.cli import app
from copilot_cli.core.artifacts import DIGEST_KEY, sealed


def _copy(out: Path, name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(out / name, tmp_path / name))


def _reseal(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    data.pop(DIGEST_KEY)
    edit(data)
    path.write_text(json.dumps(sealed(data)))


def _regress_kv(runner, kv: Path, tmp_path: Path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "def add(a, b):"}\n')
    args = ["regress", "--prompts", str(prompts), "-v", f"x=kv={kv}", "--gen-tokens", "1"]
    return runner.invoke(app, [*args, "--max-tokens", "16"])


def _refused(result, code: int, *words: str) -> None:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    for word in words:
        assert word in result.output, result.output


@pytest.mark.parametrize("token", [10**30, -1, 10**9])
def test_a_kv_index_with_an_impossible_token_id(runner, shipped_artifacts, tmp_path, token):
    from copilot_cli.kv.format import block_hashes

    kv = _copy(shipped_artifacts[0], "kv", tmp_path)

    def edit(index):
        for entry in index["prefixes"].values():
            entry["token_ids"][0] = token
            if 0 <= token < 1 << 63:  # hashes consistent where they can be
                entry["block_hashes"] = block_hashes(
                    entry["token_ids"], index["block_size"], index["model_fingerprint"]
                )

    _reseal(kv / "index.json", edit)
    _refused(runner.invoke(app, ["inspect", str(kv)]), 1, "bad:")
    _refused(_regress_kv(runner, kv, tmp_path), 2, "index.json")


def test_a_kv_index_with_no_prefix_is_refused_as_a_variant(runner, shipped_artifacts, tmp_path):
    kv = _copy(shipped_artifacts[0], "kv", tmp_path)
    _reseal(kv / "index.json", lambda index: index["prefixes"].clear())
    _refused(_regress_kv(runner, kv, tmp_path), 2, "no prefix")


def test_a_bundle_source_that_is_not_utf8(runner, shipped_artifacts, tmp_path):
    bundle = _copy(shipped_artifacts[0], "templates", tmp_path)
    manifest = json.loads((bundle / "manifest.json").read_text())
    old = manifest["templates"][0]["unit_sha256"]
    source = bundle / "sources" / f"{old}.j2"
    data = source.read_bytes() + b"\xff caf\xe9"
    new = hashlib.sha256(data).hexdigest()
    source.unlink()
    (bundle / "sources" / f"{new}.j2").write_bytes(data)

    def edit(m):
        for entry in [*m["templates"], *m["parts"].values()]:
            if entry["unit_sha256"] == old:
                entry["unit_sha256"] = new

    _reseal(bundle / "manifest.json", edit)
    _refused(runner.invoke(app, ["inspect", str(bundle)]), 1, "bad:", "UTF-8")
    out = tmp_path / "kv"
    _refused(runner.invoke(app, ["prefill-kv", str(bundle), "-o", str(out)]), 2, "not UTF-8")
    assert not out.exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [("kept_ids", 10**9), ("kept_ids", -3), ("kept_ids", "repeat"), ("bits", 3)],
)
def test_a_quantized_table_with_impossible_ids_or_scheme(
    runner, shipped_artifacts, tmp_path, field, value
):
    from copilot_cli.core.errors import ArtifactError
    from copilot_cli.quant.format import read, write

    quant = _copy(shipped_artifacts[0], "quant8", tmp_path)
    path = quant / "embeddings.safetensors"
    tables, metadata = read(path)
    metadata = {k: v for k, v in metadata.items() if k not in ("format", "format_version")}
    stored = tables["embed"]
    if field == "bits":
        metadata["bits"] = value
    else:
        ids = stored.kept_ids.clone()
        if value == "repeat":
            ids[1] = ids[0]
        else:
            ids[-1 if value > 0 else 0] = value
        tables["embed"] = type(stored)(stored.table, ids, stored.kept_rows)
    write(path, tables, {k: v for k, v in metadata.items() if k != DIGEST_KEY})
    with pytest.raises(ArtifactError):
        read(path)
    _refused(runner.invoke(app, ["inspect", str(quant)]), 1, "bad:")
    assert torch.equal(tables["embed"].table.q, stored.table.q)  # only what was meant changed
