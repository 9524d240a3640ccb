"""Ray on one machine: does running on a cluster cost anything? Runs in the Ray environment
(`make ray-env`; run_all.py picks it).

Chunk: four real Python packages nobody here wrote (rich, jinja2, click, typer, as installed:
~2.9 MB of .py), chunked together into one output (cache off), on a local Ray cluster with two
workers (started once, as `--ray auto` finds one running; start-up measured apart) vs this
machine's own executor with one and two processes. Outputs are compared byte for byte.

Prefill: eight prefixes sharing a 768-token trunk, each with 256 tokens of its own (a ~30M
Llama, random init, float32), on two Ray actors: the trunk's cache shipped to each subtree vs
recomputed by each; and vs one process.

Rows (medians of interleaved rounds):
  chunk, Ray 2 workers vs --jobs 1                (speed-up)
  chunk, Ray 2 workers vs --jobs 2                (goal: Ray within 1.3x of local processes)
  prefill, ship vs recompute the trunk            (decides kv/units.TRUNK)
  prefill, Ray (ship) vs one process
"""

# venv: .venv-ray

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit, saved_llama

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rich", "jinja2", "click", "typer")
ROUNDS = 3


def _site_packages() -> Path:
    import rich

    return Path(rich.__file__).resolve().parents[1]


def _interleaved(runs: dict[str, object], rounds: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, fn in runs.items():
            started = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in times.items()}


def bench_chunk(tmp: Path) -> None:
    import shutil

    from copilot_cli.chunking import ChunkOptions, chunk_repository
    from copilot_cli.core.models import default_model, load_tokenizer

    repos = []
    for name in PACKAGES:
        dest = tmp / "repos" / name
        shutil.copytree(_site_packages() / name, dest, ignore=shutil.ignore_patterns("__pycache__"))
        repos.append(dest)
    size = sum(p.stat().st_size for r in repos for p in r.rglob("*.py"))
    tokenizer = load_tokenizer(default_model())

    def run(name: str, jobs: int, ray: str | None):
        options = ChunkOptions(
            repos=tuple(repos), out=tmp / f"{name}.jsonl", jobs=jobs, use_cache=False, ray=ray
        )
        return lambda: chunk_repository(options, tokenizer)

    runs = {
        "jobs1": run("jobs1", 1, None),
        "jobs2": run("jobs2", 2, None),
        "ray": run("ray", 1, "auto"),
    }
    for fn in runs.values():
        fn()  # warm-up: imports, the workers' first tokenizer
    medians = _interleaved(runs, ROUNDS)
    same = len({(tmp / f"{n}.jsonl").read_bytes() for n in runs}) == 1
    what = f"chunk {len(PACKAGES)} repositories ({size / 1e6:.1f} MB of .py)"
    emit(
        f"{what}: Ray, 2 workers vs --jobs 1",
        medians["ray"],
        medians["jobs1"],
        "s",
        note=f"outputs byte-identical: {same}; median of {ROUNDS} interleaved rounds",
    )
    emit(
        f"{what}: Ray, 2 workers vs --jobs 2 (local processes)",
        medians["ray"],
        medians["jobs2"],
        "s",
        goal="ratio >= 1/1.3 (0.769)",
        passed=medians["jobs2"] / medians["ray"] >= 1 / 1.3,
        note=f"MB/s: ray {size / 1e6 / medians['ray']:.2f}, jobs2 "
        f"{size / 1e6 / medians['jobs2']:.2f}, jobs1 {size / 1e6 / medians['jobs1']:.2f}",
    )


def bench_prefill(tmp: Path) -> None:
    import torch

    from copilot_cli.core.models import ModelSpec
    from copilot_cli.kv import PrefillOptions, PrefixSource, prefill_sources, units

    loaded = saved_llama(tmp / "model")
    torch.manual_seed(1)
    trunk = torch.randint(100, 8000, (768,)).tolist()
    sources = [
        PrefixSource(
            name=f"p{i}",
            text="",
            origin=f"bench:{i}",
            token_ids=trunk + torch.randint(100, 8000, (256,)).tolist(),
        )
        for i in range(8)
    ]

    def run(name: str, ray: str | None, trunk_mode: str = "ship"):
        def go():
            units.TRUNK = trunk_mode
            out = tmp / name
            import shutil

            shutil.rmtree(out, ignore_errors=True)
            prefill_sources(
                loaded,
                sources,
                PrefillOptions(out=out, model=ModelSpec(str(tmp / "model")), ray=ray),
            )

        return go

    runs = {
        "ship": run("ship", "auto", "ship"),
        "recompute": run("recompute", "auto", "recompute"),
        "local": run("local", None),
    }
    medians = _interleaved(runs, ROUNDS)
    units.TRUNK = "ship"
    what = "prefill 8 prefixes (768-token shared trunk + 256 each, ~30M llama)"
    emit(
        f"{what}: Ray ship the trunk's cache vs recompute it per subtree",
        medians["ship"],
        medians["recompute"],
        "s",
        note="two actors, one thread each; the faster is the default (kv/units.TRUNK)",
    )
    emit(
        f"{what}: Ray (ship), 2 actors vs one process",
        medians["ship"],
        medians["local"],
        "s",
        note="the trunk is computed here first, then the subtrees in parallel",
    )


def main() -> None:
    import ray
    import torch

    torch.set_num_threads(1)  # two one-thread replicas on the two cores
    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    print(f"# ray.init (local, 2 CPUs): {time.perf_counter() - started:.1f} s", file=sys.stderr)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            bench_chunk(Path(tmp))
            bench_prefill(Path(tmp))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
