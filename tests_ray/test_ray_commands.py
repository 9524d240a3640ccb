"""chunk, regress and prefill-kv on a local Ray cluster: the same bytes and numbers as without
Ray, a worker killed mid-run changes nothing, an interrupted run resumes from its caches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests_ray.conftest import REPO, tree_bytes

PROMPTS = REPO / "sample_data" / "prompts.jsonl"


def _chunk(repos, out: Path, ray: str | None, **kw):
    from copilot_cli.chunking import ChunkOptions, chunk_repository

    options = ChunkOptions(
        repos=repos, out=out / "chunks.jsonl", registry=out / "registry.json", jobs=1, ray=ray, **kw
    )
    return chunk_repository(options)


def test_chunk_of_three_repositories_is_byte_identical(cluster, repositories, tmp_path):
    local = _chunk(repositories, tmp_path / "local", None, use_cache=False)
    remote = _chunk(repositories, tmp_path / "ray", "auto", use_cache=False)
    assert tree_bytes(tmp_path / "local") == tree_bytes(tmp_path / "ray")
    assert local.summary.files == remote.summary.files > 50
    header = json.loads((tmp_path / "ray" / "chunks.jsonl").read_text().splitlines()[0])
    assert header["repositories"] == ["sample", "kvpkg", "docs"]
    assert local.summary.exact_duplicates_folded >= 1  # the file two repositories share


def test_chunk_resumes_from_the_per_file_cache(cluster, repositories, tmp_path):
    first = _chunk(repositories, tmp_path / "a", "auto")
    again = _chunk(repositories, tmp_path / "b", "auto")
    assert again.summary.cache_hits == again.summary.files == first.summary.files
    assert tree_bytes(tmp_path / "a") == tree_bytes(tmp_path / "b")


def _regress(tmp_path: Path, name: str, ray: str | None, **kw):
    from copilot_cli.regress import RegressOptions, ReportPaths, run_regress

    options = RegressOptions(
        prompts=PROMPTS,
        variants=("kv8=kv-dtype=int8", "p=prune=0.5"),
        gen_tokens=4,
        max_tokens=96,
        reports=ReportPaths(json=tmp_path / f"{name}.json"),
        ray=ray,
        **kw,
    )
    result = run_regress(options)
    report = json.loads((tmp_path / f"{name}.json").read_text())
    report.pop("timing")
    return result, report


def test_regress_numbers_and_baseline_are_identical(cluster, tmp_path):
    _, local = _regress(
        tmp_path, "local", None, save_baseline=tmp_path / "local.st", baseline_topk=16
    )
    result, remote = _regress(
        tmp_path, "ray", "auto", save_baseline=tmp_path / "ray.st", baseline_topk=16
    )
    local.pop("baseline_saved", None), remote.pop("baseline_saved", None)
    assert remote == local
    assert result.variants[0].summary.positions > 500
    assert (tmp_path / "ray.st").read_bytes() == (tmp_path / "local.st").read_bytes()
    _, reused_local = _regress(tmp_path, "reuse-local", None, baseline=tmp_path / "local.st")
    _, reused_ray = _regress(tmp_path, "reuse-ray", "auto", baseline=tmp_path / "local.st")
    assert reused_ray == reused_local


@pytest.mark.parametrize("trunk", ["ship", "recompute"])
def test_prefill_is_byte_identical(cluster, bundle, tmp_path, monkeypatch, trunk):
    from copilot_cli.kv import PrefillOptions, prefill_kv, units

    monkeypatch.setattr(units, "TRUNK", trunk)
    prefill_kv(PrefillOptions(out=tmp_path / "local", bundle=bundle))
    result = prefill_kv(PrefillOptions(out=tmp_path / "ray", bundle=bundle, ray="auto"))
    assert tree_bytes(tmp_path / "local") == tree_bytes(tmp_path / "ray")
    assert result.computed_tokens == result.distinct_tokens > 1000
    again = prefill_kv(PrefillOptions(out=tmp_path / "ray", bundle=bundle, ray="auto"))
    assert again.reused_tokens == again.distinct_tokens  # a rerun reuses every segment


def test_subtrees_are_cut_so_every_replica_has_work():
    from copilot_cli.kv.units import plan

    # root -> a -> (b, c -> (d, e)); f alone
    parents = [-1, 0, 0, 2, 2, -1]
    trunk, units = plan(parents, 2)
    assert trunk == [] and units == [[0, 1, 2, 3, 4], [5]]
    trunk, units = plan(parents, 3)
    assert trunk == [0] and units == [[1], [2, 3, 4], [5]]
    trunk, units = plan(parents, 4)
    assert trunk == [0, 2] and units == [[1], [3], [4], [5]]


def test_build_on_ray_makes_the_same_artifacts(cluster, tmp_path):
    from copilot_cli.pipeline import BuildOptions, run_build

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(PROMPTS.read_text().splitlines(True)[:4]))
    config = (REPO / "copilot-opt.yaml").read_text()
    config = config.replace("templates: templates", f"templates: {REPO / 'templates'}")
    config = config.replace("  - sample_data/repo", f"  - {REPO / 'sample_data/repo'}")
    config = config.replace("prompts: sample_data/prompts.jsonl", f"prompts: {prompts}")
    config = config.replace("gen_tokens: 16", "gen_tokens: 2")
    for name, ray in (("local", None), ("ray", "auto")):
        text = config + (f"executor:\n  ray: {ray}\n" if ray else "")
        (tmp_path / f"{name}.yaml").write_text(text)
        run_build(BuildOptions(config=tmp_path / f"{name}.yaml", out=tmp_path / name))
    local, remote = tree_bytes(tmp_path / "local"), tree_bytes(tmp_path / "ray")
    timed = {"build-manifest.json"} | {k for k in local if k.startswith("reports/")}
    assert {k: v for k, v in remote.items() if k not in timed} == {
        k: v for k, v in local.items() if k not in timed
    }
    # the reports name their artifacts' paths (local/ vs ray/): the same otherwise
    reports = [(tmp_path / n / "reports" / "regress.json").read_text() for n in ("local", "ray")]
    ray_report = reports[1].replace(str(tmp_path / "ray"), str(tmp_path / "local"))
    assert json.loads(ray_report)["variants"] == json.loads(reports[0])["variants"]


def test_an_unreachable_cluster_is_one_line_at_once(tmp_path):
    """No Ray logging, no minutes of retries: our one line, exit 2."""
    import subprocess
    import sys
    import time

    started = time.monotonic()
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "copilot_cli",
            "chunk",
            str(REPO / "sample_data" / "repo"),
            "-o",
            str(tmp_path / "c.jsonl"),
            "--no-cache",
            "--ray",
            "127.0.0.1:1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip().splitlines() == [
        "error: --ray: cannot join the Ray cluster at 127.0.0.1:1: Connection refused"
    ]
    assert time.monotonic() - started < 60 and not (tmp_path / "c.jsonl").exists()


def test_a_local_cluster_prints_nothing_of_ray_s_own(tmp_path):
    import subprocess
    import sys

    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "copilot_cli",
            "chunk",
            str(REPO / "sample_data" / "repo"),
            "-o",
            str(tmp_path / "c.jsonl"),
            "--no-cache",
            "--ray",
            "local",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "ray" not in run.stderr.lower() and "logging.cc" not in run.stderr, run.stderr
