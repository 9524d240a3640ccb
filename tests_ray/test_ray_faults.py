"""A worker killed (SIGKILL) mid-run: Ray retries its work and the result is unchanged. Each test
starts its own Ray instance (`ray="local"`), which carries COPILOT_OPT_* variables to the
workers; COPILOT_OPT_RAY_KILL_ONCE makes the first worker to start a unit of work kill itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests_ray.conftest import tree_bytes


@pytest.fixture()
def kill_once(tmp_path, monkeypatch) -> Path:
    marker = tmp_path / "killed"
    monkeypatch.setenv("COPILOT_OPT_RAY_KILL_ONCE", str(marker))
    return marker


def test_chunk_survives_a_killed_worker(repositories, tmp_path, kill_once):
    from copilot_cli.chunking import ChunkOptions, chunk_repository

    def run(out: Path, ray: str | None) -> None:
        chunk_repository(
            ChunkOptions(repos=repositories, out=out, jobs=1, use_cache=False, ray=ray)
        )

    run(tmp_path / "local.jsonl", None)
    run(tmp_path / "ray.jsonl", "local")
    assert kill_once.exists()  # a worker did die
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()


def test_prefill_survives_a_killed_actor(bundle, tmp_path, kill_once):
    from copilot_cli.kv import PrefillOptions, prefill_kv

    prefill_kv(PrefillOptions(out=tmp_path / "local", bundle=bundle))
    prefill_kv(PrefillOptions(out=tmp_path / "ray", bundle=bundle, ray="local"))
    assert kill_once.exists()
    assert tree_bytes(tmp_path / "local") == tree_bytes(tmp_path / "ray")


def test_regress_survives_a_killed_actor(tmp_path, kill_once):
    from copilot_cli.regress import RegressOptions, run_regress
    from tests_ray.conftest import REPO

    def run(ray: str | None):
        options = RegressOptions(
            prompts=REPO / "sample_data" / "prompts.jsonl",
            variants=("kv8=kv-dtype=int8",),
            gen_tokens=2,
            max_tokens=64,
            ray=ray,
        )
        result = run_regress(options).to_dict()
        result.pop("timing")
        return result

    local = run(None)
    remote = run("local")
    assert kill_once.exists()
    assert remote == local
