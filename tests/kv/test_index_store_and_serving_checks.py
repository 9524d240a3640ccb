"""What the vLLM connector stands on, tested without vLLM: the folder's prefix tree, the
host-memory segment store, the compatibility checks and `copilot-opt serve`'s refusals."""

from __future__ import annotations

import json
import shutil

import pytest

from copilot_cli.cli import app
from copilot_cli.core.errors import ArtifactError, FingerprintMismatch
from copilot_cli.core.models import SHIPPED_MODEL, ModelSpec, load_model, load_tokenizer
from copilot_cli.kv import (
    KVCacheDir,
    PrefillOptions,
    PrefixSource,
    RadixTree,
    SegmentStore,
    prefill_sources,
)
from copilot_cli.serving.compat import EngineModel, check_servable

SHARED = list(range(100, 140))


@pytest.fixture(scope="module")
def shipped():
    return load_model(ModelSpec())


@pytest.fixture(scope="module")
def folder(tmp_path_factory, shipped):
    out = tmp_path_factory.mktemp("kv")
    sources = [
        PrefixSource("a", "", "t", token_ids=tuple(SHARED + [1000 + i for i in range(30)])),
        PrefixSource("b", "", "t", token_ids=tuple(SHARED + [2000 + i for i in range(10)])),
        PrefixSource("c", "", "t", token_ids=tuple(range(3000, 3020))),
    ]
    prefill_sources(shipped, sources, PrefillOptions(out=out))
    return out


def test_the_longest_stored_prefix_of_any_sequence(folder):
    kv = KVCacheDir(folder)
    tree = RadixTree.from_index(kv.index)
    a = kv.prefix("a").token_ids
    whole = tree.match(a + [7, 8, 9])
    assert whole.length == len(a) and [s[0] for s in whole.segments] == kv.prefix("a").segments
    partial = tree.match(SHARED[:25] + [5, 5, 5])
    assert partial.length == 25 and len(partial.segments) == 1  # the shared segment, in part
    across = tree.match(SHARED + [1000, 1001, 1002, 9])
    assert across.length == len(SHARED) + 3 and len(across.segments) == 2
    assert tree.match([42, 43]).length == 0 and tree.match([]).segments == ()
    assert across.covering(len(SHARED), len(SHARED) + 3) == [across.segments[1]]


def _store(kv: KVCacheDir, max_bytes: int) -> SegmentStore:
    return SegmentStore(
        kv.path,
        model_fingerprint=kv.model_fingerprint,
        tokenizer_fingerprint=kv.index.tokenizer_fingerprint,
        geometry=kv.index.geometry,
        max_bytes=max_bytes,
    )


def test_the_segment_store_verifies_keeps_and_evicts_by_bytes(folder):
    kv = KVCacheDir(folder)
    hashes = sorted(kv.index.segments)
    one = _store(kv, 1 << 30)
    first = one.get(hashes[0])
    assert one.get(hashes[0]) is first and (one.hits, one.misses) == (1, 1)
    budget = max(one.get(h).nbytes for h in hashes)  # room for the largest segment only
    small = _store(kv, budget)
    for seg_hash in hashes:
        small.get(seg_hash)
        assert small.bytes_held <= budget
    held = len(small._segments)
    assert hashes[-1] in small._segments  # the newest stays
    assert small.evictions == len(hashes) - held >= 1


def test_a_corrupt_or_misplaced_segment_is_refused(folder, tmp_path):
    copy = shutil.copytree(folder, tmp_path / "copy")
    kv = KVCacheDir(copy)
    seg_hash = kv.prefix("c").segments[0]
    path = copy / "segments" / f"{seg_hash}.safetensors"
    data = bytearray(path.read_bytes())
    data[-50] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="digest"):
        _store(kv, 1 << 30).check(seg_hash)
    child = kv.prefix("a").segments[1]
    with pytest.raises(ArtifactError, match="chain"):
        _store(kv, 1 << 30).check(child, parent="0" * 64)


def _engine(model_dir, **changes) -> EngineModel:
    values = {
        "model_dir": model_dir,
        "tokenizer": load_tokenizer(str(SHIPPED_MODEL)),
        "dtype": "float32",
        "num_layers": 4,
        "kv_heads": 2,
        "head_dim": 32,
    }
    values.update(changes)
    return EngineModel(**values)


def test_a_folder_is_servable_only_by_its_model_dtype_and_geometry(folder, tiny_llama_dir):
    kv = KVCacheDir(folder)
    check_servable(kv, _engine(SHIPPED_MODEL))
    with pytest.raises(FingerprintMismatch, match="made for model"):
        check_servable(kv, _engine(tiny_llama_dir))
    with pytest.raises(ArtifactError, match="bfloat16"):
        check_servable(kv, _engine(SHIPPED_MODEL, dtype="bfloat16"))
    with pytest.raises(ArtifactError, match="geometry"):
        check_servable(kv, _engine(SHIPPED_MODEL, kv_heads=8))


def test_serve_refuses_without_vllm_or_with_a_foreign_folder(folder, runner, tiny_llama_dir):
    result = runner.invoke(app, ["serve", str(folder)])
    assert result.exit_code == 2 and "make vllm-env" in result.stderr  # no vLLM in this venv
    result = runner.invoke(
        app, ["serve", str(folder), "--model", str(tiny_llama_dir), "--print-command"]
    )
    assert result.exit_code == 2 and "made for model" in result.stderr
    result = runner.invoke(
        app, ["serve", str(folder), "--print-command", "--port", "9001", "--", "--enforce-eager"]
    )
    assert result.exit_code == 0, result.output
    line = result.stdout.strip()
    assert line.startswith("vllm serve ") and "--port 9001" in line and "--enforce-eager" in line
    config = json.loads(line.split("--kv-transfer-config ", 1)[1].split("' ")[0].strip("'"))
    assert config["kv_connector"] == "CopilotPrefixConnector"
    assert config["kv_connector_module_path"] == "copilot_cli.serving.vllm"
    assert config["kv_role"] == "kv_consumer"
    assert config["kv_connector_extra_config"]["kv_dir"] == str(folder.resolve())
