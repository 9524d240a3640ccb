"""regress on a Ray cluster: units of cases spread over actors, each holding one model replica.

An actor loads the model once (CPU, or one GPU each when the model's device is CUDA) and
scores units with the same code a local run uses (`units.score_unit`): the same batches, so
the same padded forwards and the same numbers. What comes back is per position, not averaged:
the caller adds the records to its tallies in case order, so every statistic — means,
percentiles, standard errors, the verdict — is computed over the same values in the same order
as in one process, and is identical. A baseline being saved is written per unit on the actor
(the same tensors, keyed by case) and merged by name.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from copilot_cli.core import cluster, progress
from copilot_cli.regress.baseline import BaselineWriter
from copilot_cli.regress.options import RegressOptions
from copilot_cli.regress.units import Unit, score_unit


class Shard:
    """One model replica on a Ray worker."""

    def __init__(self, options: RegressOptions, threads: int) -> None:
        from copilot_cli.core.models import load_model
        from copilot_cli.regress.engine import Runner

        torch.set_num_threads(threads)  # the caller's: the same kernels, the same sums
        self.runner = Runner(load_model(options.model), options)

    def fingerprint(self) -> str:
        return self.runner.loaded.model_fingerprint

    def score(self, unit: Unit, topk: int | None) -> dict[str, Any]:
        cluster.maybe_die_once()
        runner = self.runner
        forward, metric = runner.forward_seconds, runner.metric_seconds
        writer = BaselineWriter(topk) if topk is not None else None
        scored = score_unit(runner, unit, writer)
        return {
            "scored": scored,
            "tensors": writer.tensors if writer else {},
            "sets": writer.sets if writer else {},
            "forward": runner.forward_seconds - forward,
            "metric": runner.metric_seconds - metric,
        }


def score_on_ray(
    runner: Any, units: list[Unit], writer: BaselineWriter | None
) -> Iterator[tuple[Unit, Any]]:
    """(unit, its scored records) for every unit, in order, scored by actors."""
    options = runner.options
    cases = sum(unit.size for unit in units)
    results = []
    with cluster.session(options.ray) as ray:
        from ray.util.actor_pool import ActorPool

        gpus = str(options.model.device).startswith("cuda")
        threads = torch.get_num_threads()
        actors = cluster.start_replicas(
            ray,
            Shard,
            (options, threads),
            threads,
            gpus=gpus,
            fingerprint=runner.loaded.model_fingerprint,
            wanted=len(units),
        )
        pool = ActorPool(actors)
        topk = writer.topk if writer is not None else None
        for unit in units:
            pool.submit(lambda a, u: a.score.remote(u, topk), unit)
        with progress.progress(
            f"scoring {cases} cases on {len(actors)} Ray actors", total=cases
        ) as bar:
            for unit in units:
                results.append(pool.get_next())
                bar.advance(unit.size)
    for unit, result in zip(units, results, strict=True):
        runner.forward_seconds += result["forward"]
        runner.metric_seconds += result["metric"]
        if writer is not None:
            writer.tensors.update(result["tensors"])
            for key, count in result["sets"].items():
                writer.sets[key] = max(writer.sets.get(key, 0), count)
        yield unit, result["scored"]
