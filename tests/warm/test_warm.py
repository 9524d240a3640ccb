"""warm-plan: the request log, the session generator, the Bloom filter, the predictors, the
plan's tiers within the budget, and a PrefixStore that follows a plan."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from copilot_cli.cli import app
from copilot_cli.warm import BloomFilter, RequestLog, read_log, read_plan
from copilot_cli.warm.sessions import SessionConfig, generate_sessions, repositories_from_chunks

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("line", "expect"),
    [
        ("not json", "Expecting value"),
        ("[1, 2]", "JSON object"),
        ('{"session": "a", "prefix": "x"}', '"t" must be'),
        ('{"t": NaN, "session": "a", "prefix": "x"}', '"t" must be'),
        ('{"t": 1, "session": "", "prefix": "x"}', '"session" must be'),
        ('{"t": 1, "session": "a", "prefix": 3}', '"prefix" must be'),
        ('{"t": 1, "session": "a", "prefix": "x", "chunks": "c1"}', '"chunks" must be'),
    ],
)
def test_a_malformed_log_line_is_exit_2_naming_the_line(runner, tmp_path, line, expect):
    log = tmp_path / "log.jsonl"
    log.write_text('{"t": 0, "session": "a", "prefix": "bug-fix"}\n' + line + "\n")
    result = runner.invoke(
        app, ["warm-plan", str(log), "-o", str(tmp_path / "p.json"), "--chunks", str(log)]
    )
    assert result.exit_code == 2, result.output
    assert f"{log}:2" in result.stderr and expect in result.stderr
    assert not (tmp_path / "p.json").exists()


def test_request_log_lines_from_several_threads_parse(tmp_path):
    import threading

    log = RequestLog(tmp_path / "requests.jsonl")
    threads = [
        threading.Thread(
            target=lambda n=n: [
                log.record(f"s{n}", "bug-fix", chunks=["c1"], t=i) for i in range(200)
            ]
        )
        for n in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    log.close()
    requests = read_log([tmp_path / "requests.jsonl"])
    assert len(requests) == 800 and {r.session for r in requests} == {"s0", "s1", "s2", "s3"}
    assert requests[0].items() == [("prefix", "bug-fix"), ("chunk", "c1")]


def test_bloom_filter_has_no_false_negatives_and_its_stated_rate():
    items = [f"chunk:{i:06d}" for i in range(5000)]
    bloom = BloomFilter.for_items(items, 0.01)
    assert all(item in bloom for item in items)
    probes = [f"other:{i}" for i in range(20000)]
    rate = sum(p in bloom for p in probes) / len(probes)
    assert 0.003 < rate < 0.02, rate
    again = BloomFilter.from_dict(json.loads(json.dumps(bloom.to_dict())))
    assert all(item in again for item in items[:100]) and again.array == bloom.array


@pytest.fixture(scope="module")
def sample_chunks(tmp_path_factory) -> Path:
    from copilot_cli.chunking import ChunkOptions, chunk_repository

    out = tmp_path_factory.mktemp("chunks") / "repo.jsonl"
    chunk_repository(ChunkOptions(repos=(REPO / "sample_data" / "repo",), out=out, use_cache=False))
    return out


def test_the_generator_script_writes_the_same_log_every_time(tmp_path, sessions_log):
    out = tmp_path / "sessions.jsonl"
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "generate_sessions.py"), "--out", str(out)],
        check=True,
        capture_output=True,
    )
    assert out.read_bytes() == sessions_log.read_bytes() and out.stat().st_size > 100_000


def test_sessions_look_like_editing(sample_chunks):
    repos = repositories_from_chunks(sample_chunks)
    requests = generate_sessions(["a", "b", "c", "d"], repos, SessionConfig(seed=3, sessions=120))
    assert requests == generate_sessions(
        ["a", "b", "c", "d"], repos, SessionConfig(seed=3, sessions=120)
    )
    counts = {t: sum(r.prefix == t for r in requests) for t in "abcd"}
    assert counts["a"] > counts["b"] > counts["d"]  # Zipf popularity
    by_session: dict[str, list] = {}
    for r in requests:
        by_session.setdefault(r.session, []).append(r)
    same = moves = neighbour = 0
    graph = repos[0].neighbours
    for session in by_session.values():
        for before, after in itertools.pairwise(session):
            if before.files[0] == after.files[0]:
                same += 1
            else:
                moves += 1
                neighbour += after.files[0] in graph[before.files[0]]
    assert same > moves  # bursts on one file
    assert neighbour / moves > 0.5  # moves follow the import graph


def test_warm_plan_keeps_the_budget_and_is_reproducible(
    runner, tmp_path, shipped_artifacts, sample_chunks, sessions_log
):
    out, _ = shipped_artifacts
    args = ["warm-plan", str(sessions_log), "--kv", str(out / "kv"), "--chunks", str(sample_chunks)]
    args += ["--budget", "900kB", "--predictor", "markov-1"]
    first = runner.invoke(app, [*args, "-o", str(tmp_path / "a.json")])
    assert first.exit_code == 0, first.output
    runner.invoke(app, [*args, "-o", str(tmp_path / "b.json")])
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    plan = read_plan(tmp_path / "a.json")
    resident = [i for i in plan.items if i.tier in ("L0", "L1")]
    index = json.loads((out / "kv" / "index.json").read_text())
    segments = {  # what a store holds for them: every shared segment once
        s for i in resident if i.kind == "prefix" for s in index["prefixes"][i.id]["segments"]
    }
    held = sum(index["segments"][s]["bytes"] for s in segments)
    held += sum(i.bytes for i in resident if i.kind == "chunk")
    assert 0 < held <= 900_000 < sum(i.bytes for i in resident)  # shared: more fits
    for tier in ("L0", "L1", "L2"):  # the tier table counts a shared segment once too
        members = [i for i in plan.items if i.tier == tier]
        distinct = {
            s for i in members if i.kind == "prefix" for s in index["prefixes"][i.id]["segments"]
        }
        expected = sum(index["segments"][s]["bytes"] for s in distinct)
        expected += sum(i.bytes for i in members if i.kind == "chunk")
        assert plan.tier_bytes[tier] == expected, tier
        assert f"{expected:,}" in first.output
    assert held <= plan.tier_bytes["L0"] + plan.tier_bytes["L1"] < sum(i.bytes for i in resident)
    assert {i.kind for i in plan.items} == {"prefix", "chunk"}
    for item in plan.items:
        assert item.tier in ("L0", "L1", "L2") and 0 <= item.probability <= 1 and item.bytes > 0
    assert all(i.probability >= 0.5 for i in plan.items if i.tier == "L0")
    l2 = [i for i in plan.items if i.tier == "L2"]
    assert l2 and all(plan.may_be_stored(i.kind, i.id) for i in l2)
    data = json.loads((tmp_path / "a.json").read_text())
    assert data["evaluation"]["markov-1"]["uses"] > 1000
    data["items"][0]["tier"] = "L0" if data["items"][0]["tier"] != "L0" else "L1"
    (tmp_path / "a.json").write_text(json.dumps(data))
    from copilot_cli.core.errors import ArtifactError

    with pytest.raises(ArtifactError, match="digest"):
        read_plan(tmp_path / "a.json")


@pytest.mark.parametrize("share", [0.0, 0.3, 1.0])
def test_l0_pins_at_most_its_share_of_the_budget(
    runner, tmp_path, shipped_artifacts, sample_chunks, share, sessions_log
):
    out, _ = shipped_artifacts
    args = ["warm-plan", str(sessions_log), "--kv", str(out / "kv"), "--chunks", str(sample_chunks)]
    args += ["--budget", "900kB", "--predictor", "frequency-recency", "--l0-share", str(share)]
    result = runner.invoke(app, [*args, "-o", str(tmp_path / "p.json")])
    assert result.exit_code == 0, result.output
    plan = read_plan(tmp_path / "p.json")
    index = json.loads((out / "kv" / "index.json").read_text())

    def held(tiers: tuple[str, ...]) -> int:
        items = [i for i in plan.items if i.tier in tiers]
        segments = {
            s for i in items if i.kind == "prefix" for s in index["prefixes"][i.id]["segments"]
        }
        chunks = sum(i.bytes for i in items if i.kind == "chunk")
        return sum(index["segments"][s]["bytes"] for s in segments) + chunks

    assert held(("L0",)) <= share * 900_000
    assert 0 < held(("L0", "L1")) <= 900_000  # what L0 may not pin is still pre-loaded (L1)
    if share == 0.0:
        assert not plan.in_tier("L0")
    if share == 1.0:  # everything likely enough and fitting is pinned: no L1 at >= 50%
        assert all(i.probability < 0.5 for i in plan.in_tier("L1"))


def test_l0_share_outside_0_1_is_refused(
    runner, tmp_path, shipped_artifacts, sample_chunks, sessions_log
):
    out, _ = shipped_artifacts
    args = ["warm-plan", str(sessions_log), "--kv", str(out / "kv"), "--l0-share", "1.5"]
    result = runner.invoke(app, [*args, "-o", str(tmp_path / "p.json")])
    assert result.exit_code == 2
    assert "--l0-share" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "p.json").exists()


def _plan_for(tmp_path: Path, kv: Path, l0: list[str], l1: list[str], l2: list[str]):
    from copilot_cli.warm.plan import Plan, PlanItem

    items = [PlanItem(n, "prefix", "L0", 1, 0.9) for n in l0]
    items += [PlanItem(n, "prefix", "L1", 1, 0.4) for n in l1]
    items += [PlanItem(n, "prefix", "L2", 1, 0.1) for n in l2]
    index = json.loads((kv / "index.json").read_text())
    bloom = BloomFilter.for_items([f"prefix:{n}" for n in l2], 0.001)
    kv_fps = {k: index[k] for k in ("model_fingerprint", "tokenizer_fingerprint")}
    return Plan(items=items, budget=1 << 30, window=600, predictor="test", bloom=bloom, kv=kv_fps)


def test_prefix_store_follows_a_plan(shipped_artifacts, tmp_path):
    import shutil

    from copilot_cli.core.models import ModelSpec, load_model
    from copilot_cli.kv import PrefixStore

    out, _ = shipped_artifacts
    kv = Path(shutil.copytree(out / "kv", tmp_path / "kv"))
    names = sorted(json.loads((kv / "index.json").read_text())["prefixes"])
    loaded = load_model(ModelSpec())
    plan = _plan_for(tmp_path, kv, names[:1], names[1:3], names[3:5])
    store = PrefixStore(kv, loaded.model, plan=plan, request_log=RequestLog(tmp_path / "log.jsonl"))
    assert store.resident(names[0])  # L0 resident before any request
    assert store.wait_warm(60) and store.resident(names[1]) and store.resident(names[2])
    store.max_bytes = 1  # pressure: everything evictable goes, L0 stays
    store.release(names[0])
    assert store.resident(names[0])
    assert store.get(names[3], session="dev") is not None  # L2: in the filter, read on use
    outside = names[5]  # in no tier: the filter rules it out, no disk read
    entry = json.loads((kv / "index.json").read_text())["prefixes"][outside]
    for segment in entry["segments"]:
        (kv / "segments" / f"{segment}.safetensors").unlink(missing_ok=True)
    assert store.get(outside, session="dev") is None and store.bloom_skips == 1
    store.close()
    logged = read_log([tmp_path / "log.jsonl"])
    assert [r.prefix for r in logged] == [names[3], outside]


def test_a_plan_for_another_kv_folder_is_refused(shipped_artifacts, tmp_path):
    from copilot_cli.core.errors import ArtifactError
    from copilot_cli.core.models import ModelSpec, load_model
    from copilot_cli.kv import PrefixStore

    out, _ = shipped_artifacts
    plan = _plan_for(tmp_path, out / "kv", [], [], [])
    model = load_model(ModelSpec()).model
    index = json.loads((out / "kv" / "index.json").read_text())
    for key in ("model_fingerprint", "tokenizer_fingerprint"):  # either one differing
        plan.kv = {k: index[k] for k in ("model_fingerprint", "tokenizer_fingerprint")}
        plan.kv[key] = "0" * 64
        with pytest.raises(ArtifactError, match="another KV folder's " + key.split("_")[0]):
            PrefixStore(out / "kv", model, plan=plan)


def test_the_offline_optimum_evicts_what_is_used_farthest_ahead():
    from copilot_cli.warm import Sizes, offline_optimum

    sizes = Sizes()
    for name in "abc":
        sizes.add(("prefix", name), [(name, 1)])
    uses = [("prefix", n) for n in "abcab"]
    # a, b, c miss; c's load evicts b (next used later than a); a hits; b misses
    assert offline_optimum(uses, sizes, budget=2) == pytest.approx(1 / 5)
    assert offline_optimum(uses, sizes, budget=3) == pytest.approx(2 / 5)
    assert offline_optimum([], sizes, budget=3) == 0.0


def test_segments_shared_by_prefixes_count_once():
    from copilot_cli.warm import Sizes, offline_optimum
    from copilot_cli.warm.predict import resident_bytes, resident_set

    sizes = Sizes()
    sizes.add(("prefix", "p1"), [("trunk", 10), ("own1", 1)])
    sizes.add(("prefix", "p2"), [("trunk", 10), ("own2", 1)])
    scores = {("prefix", "p1"): 0.9, ("prefix", "p2"): 0.8}
    both = resident_set(scores, sizes, budget=12)
    assert both == set(scores) and resident_bytes(both, sizes) == 12
    assert resident_set(scores, dict(sizes), budget=12) == {("prefix", "p1")}  # unshared: 22
    uses = [("prefix", p) for p in ("p1", "p2", "p1", "p2")]
    assert offline_optimum(uses, sizes, budget=12) == pytest.approx(2 / 4)
    assert offline_optimum(uses, sizes, budget=11) == pytest.approx(0 / 4)


def test_a_resealed_plan_whose_filter_would_hang_every_lookup_is_refused(
    runner, tmp_path, shipped_artifacts, sample_chunks, sessions_log
):
    from copilot_cli.core.artifacts import DIGEST_KEY, sealed
    from copilot_cli.core.errors import ArtifactError

    out, _ = shipped_artifacts
    args = ["warm-plan", str(sessions_log), "--kv", str(out / "kv"), "--chunks", str(sample_chunks)]
    result = runner.invoke(app, [*args, "--budget", "900kB", "-o", str(tmp_path / "p.json")])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "p.json").read_text())
    assert 1 <= data["l2_bloom"]["hashes"] <= 64
    data["l2_bloom"]["hashes"] = 10**9
    resealed = sealed({k: v for k, v in data.items() if k != DIGEST_KEY})
    (tmp_path / "p.json").write_text(json.dumps(resealed))
    with pytest.raises(ArtifactError, match="hashes"):
        read_plan(tmp_path / "p.json")


def test_inspect_describes_and_verifies_a_warm_plan(
    runner, tmp_path, shipped_artifacts, sessions_log
):
    out, _ = shipped_artifacts
    plan = tmp_path / "plan.json"
    made = runner.invoke(
        app, ["warm-plan", str(sessions_log), "--kv", str(out / "kv"), "-o", str(plan)]
    )
    assert made.exit_code == 0, made.output
    result = runner.invoke(app, ["inspect", str(plan), "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["kind"] == "warm-plan" and info["items"] == len(read_plan(plan).items)
    data = json.loads(plan.read_text())
    data["budget"] += 1  # edited, not resealed
    plan.write_text(json.dumps(data))
    damaged = runner.invoke(app, ["inspect", str(plan)])
    assert damaged.exit_code == 1 and "bad:" in damaged.stderr and "digest" in damaged.stderr
