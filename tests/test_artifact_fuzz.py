"""Every artifact reader, fed random byte flips and truncations: it refuses the file (a
CopilotError, exit 2 at the CLI), or — where the changed byte carries no meaning — loads exactly
what the intact file holds. Never a different object, never another exception."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from copilot_cli.core.errors import CopilotError


def _tensors(items: Any) -> Any:
    """Tensors replaced by (dtype, shape, bytes): comparable with ==."""
    if isinstance(items, torch.Tensor):
        return (
            str(items.dtype),
            tuple(items.shape),
            items.contiguous().view(torch.uint8).numpy().tobytes(),
        )
    if isinstance(items, dict):
        return {k: _tensors(v) for k, v in items.items()}
    if isinstance(items, (list, tuple)):
        return [_tensors(v) for v in items]
    return items


def _segment(root: Path) -> Any:
    from copilot_cli.kv import read_segment

    path = sorted((root / "segments").iterdir())[0]
    seg = read_segment(path)
    return _tensors([seg.metadata, seg.token_ids, seg.keys, seg.values])


def _index(root: Path) -> Any:
    from copilot_cli.kv.format import read_index

    return read_index(root)


def _quant(root: Path) -> Any:
    from copilot_cli.quant.format import read

    tables, metadata = read(root / "embeddings.safetensors")
    return _tensors(
        [
            metadata,
            {k: [t.table.q, t.table.scales, t.kept_ids, t.kept_rows] for k, t in tables.items()},
        ]
    )


def _baseline(root: Path) -> Any:
    from copilot_cli.regress.baseline import Baseline

    baseline = Baseline(root, model_fingerprint=None, tokenizer_fingerprint=None, prompts_hash=None)
    cases = [baseline.case(s, i).__dict__ for s, n in baseline.sets.items() for i in range(n)]
    return _tensors([baseline.metadata, cases])


def _bundle(root: Path) -> Any:
    from copilot_cli.prompts import load_bundle

    bundle = load_bundle(root)
    return [bundle.manifest, {name: bundle.static_prefix(name) for name in bundle.templates()}]


def _chunks(root: Path) -> Any:
    from copilot_cli.chunking import read_chunks

    return read_chunks(root)


def _registry(root: Path) -> Any:
    from copilot_cli.chunking import read_registry

    return read_registry(root)


# artifact in the shipped set -> (the file inside it to damage, how to read it all)
READERS: dict[str, tuple[Callable[[Path], Path], Callable[[Path], Any]]] = {
    "kv-segment": (lambda r: sorted((r / "segments").iterdir())[0], _segment),
    "kv-index": (lambda r: r / "index.json", _index),
    "quant8": (lambda r: r / "embeddings.safetensors", _quant),
    "quant4": (lambda r: r / "embeddings.safetensors", _quant),
    "baseline.safetensors": (lambda r: r, _baseline),
    "bundle-manifest": (lambda r: r / "manifest.json", _bundle),
    "bundle-source": (lambda r: sorted((r / "sources").iterdir())[0], _bundle),
    "chunks.jsonl": (lambda r: r, _chunks),
    "registry.json": (lambda r: r, _registry),
}
SOURCE = {
    "kv-segment": "kv",
    "kv-index": "kv",
    "bundle-manifest": "templates",
    "bundle-source": "templates",
}

mutations = st.one_of(
    st.tuples(st.just("flip"), st.floats(0, 1, exclude_max=True), st.integers(1, 255)),
    st.tuples(st.just("truncate"), st.floats(0, 1, exclude_max=True), st.just(0)),
)


def _mutate(path: Path, how: tuple[str, float, int]) -> None:
    kind, where, xor = how
    data = bytearray(path.read_bytes())
    at = int(where * len(data))
    if kind == "flip":
        data[at] ^= xor
    else:
        del data[at:]
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("name", sorted(READERS))
def test_damaged_artifacts_are_refused_or_load_identically(shipped_artifacts, name):
    out, _ = shipped_artifacts
    source = out / SOURCE.get(name, name)
    victim_of, read = READERS[name]
    original = read(source)

    @settings(max_examples=60)
    @given(how=mutations)
    def check(how: tuple[str, float, int]) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / source.name
            if source.is_dir():
                shutil.copytree(source, copy)
            else:
                shutil.copy(source, copy)
            _mutate(victim_of(copy), how)
            try:
                loaded = read(copy)
            except CopilotError:
                return
            assert loaded == original, f"{how} loaded a different object"

    check()


def test_an_edited_build_manifest_is_not_trusted(tmp_path):
    from copilot_cli.core.artifacts import canonical_json, sealed
    from copilot_cli.pipeline.manifest import FORMAT, FORMAT_VERSION, NAME, Manifest

    data = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "steps": {"a": {"x": 1}},
        "verdict": "pass",
    }
    text = canonical_json(sealed(data)).encode()

    @settings(max_examples=80)
    @given(how=mutations)
    def check(how: tuple[str, float, int]) -> None:
        (tmp_path / NAME).write_bytes(text)
        _mutate(tmp_path / NAME, how)
        manifest = Manifest(tmp_path)
        if manifest.warning is None:
            assert {k: v for k, v in manifest.data.items() if k != "copilot_opt_version"} == data
        else:
            assert manifest.data["steps"] == {} and manifest.data["verdict"] is None

    check()


# -- resealed: any field set to a hostile value, the digest recomputed (as anyone can) ---------

HOSTILE = st.sampled_from(
    [-1, 0, 10**30, 2**63, 1e308, float("nan"), True, None, "", "x" * 70, [], {}, [0] * 50_000]
    + [[[[[[[[[[["deep"]]]]]]]]]]]
)


def _paths(value: Any, path: tuple = ()) -> list[tuple]:
    """Every place in a JSON document (bounded: long lists contribute their first items)."""
    found = [path] if path else []
    if isinstance(value, dict):
        for key in sorted(value)[:50]:
            found += _paths(value[key], (*path, key))
    elif isinstance(value, list):
        for index in range(min(len(value), 3)):
            found += _paths(value[index], (*path, index))
    return found


def _set(document: Any, path: tuple, value: Any) -> None:
    for step in path[:-1]:
        document = document[step]
    document[path[-1]] = value


def _read_plan(path: Path) -> Any:
    from copilot_cli.warm import read_plan

    plan = read_plan(path)
    return [plan.to_dict() if hasattr(plan, "to_dict") else plan, plan.tier("prefix", "x")]


# artifact -> (its sealed JSON file inside a copy of the shipped one, a reader of all of it)
RESEALED = {
    "kv-index": ("kv", "index.json", lambda r: _index(r)),
    "bundle-manifest": ("templates", "manifest.json", lambda r: _bundle(r)),
    "registry.json": ("registry.json", "", lambda r: _registry(r)),
    "warm-plan": ("plan.json", "", _read_plan),
}


@pytest.mark.parametrize("name", sorted(RESEALED))
def test_resealed_artifacts_are_refused_or_read_never_a_crash(
    shipped_artifacts, runner, tmp_path, name, request
):
    import json

    from copilot_cli.cli import app
    from copilot_cli.core.artifacts import DIGEST_KEY, canonical_json, sealed

    out, _ = shipped_artifacts
    if name == "warm-plan":  # made here from the shipped KV folder
        sessions = request.getfixturevalue("sessions_log")
        made = runner.invoke(
            app,
            [
                "warm-plan",
                str(sessions),
                "--kv",
                str(out / "kv"),
                "-o",
                str(tmp_path / "plan.json"),
            ],
        )
        assert made.exit_code == 0, made.output
        out = tmp_path
    folder, inner, read = RESEALED[name]
    document = json.loads(((out / folder / inner) if inner else out / folder).read_text())
    document.pop(DIGEST_KEY)
    places = _paths(document)

    @settings(max_examples=40, deadline=None)
    @given(where=st.sampled_from(places), value=HOSTILE)
    def check(where: tuple, value: Any) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / folder
            if (out / folder).is_dir():
                shutil.copytree(out / folder, copy)
            else:
                shutil.copy(out / folder, copy)
            edited = json.loads(json.dumps(document))
            _set(edited, where, value)
            target = copy / inner if inner else copy
            target.write_text(canonical_json(sealed(edited)))
            with contextlib.suppress(CopilotError):
                read(copy)
            result = runner.invoke(app, ["inspect", str(copy)])
            assert result.exit_code in (0, 1, 2), (where, value, result.output)
            assert "internal error" not in result.output, (where, value, result.output)

    check()
