"""regress on a Ray cluster: cases sharded over actors, each holding one model replica.

An actor loads the model once (CPU, or one GPU each when the model's device is CUDA) and scores
batches of cases with the same code a local run uses (`case_record`): the base model's logits
(or the shipped baseline's, sent with the batch) and every variant, per position. What comes
back is per position, not averaged: the caller adds the records to its tallies in case order,
so every statistic — means, percentiles, standard errors, the verdict — is computed over the
same values in the same order as in one process, and is identical. A baseline being saved is
written per batch on the actor (the same tensors, keyed by case) and merged by name.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from copilot_cli.core import cluster, progress
from copilot_cli.regress.baseline import BaselineWriter
from copilot_cli.regress.cases import Case
from copilot_cli.regress.options import RegressOptions
from copilot_cli.regress.variants import VariantSpec

BATCHES_PER_ACTOR = 4  # enough to balance uneven cases, few enough to keep overhead low


class Shard:
    """One model replica on a Ray worker."""

    def __init__(self, options: RegressOptions, threads: int) -> None:
        from copilot_cli.core.models import load_model
        from copilot_cli.regress.runner import Runner

        torch.set_num_threads(threads)  # the caller's: the same kernels, the same sums
        self.runner = Runner(load_model(options.model), options)

    def fingerprint(self) -> str:
        return self.runner.loaded.model_fingerprint

    def score(
        self,
        batch: list[tuple[int, Case]],
        set_hash: str,
        members: list[VariantSpec],
        bases: dict[int, Any],
        topk: int | None,
    ) -> dict[str, Any]:
        from copilot_cli.regress.runner import case_record

        cluster.maybe_die_once()
        runner = self.runner
        forward, metric = runner.forward_seconds, runner.metric_seconds
        writer = BaselineWriter(topk) if topk is not None else None
        records = [
            (i, case_record(runner, case, i, set_hash, members, bases.get(i), writer))
            for i, case in batch
        ]
        return {
            "records": records,
            "tensors": writer.tensors if writer else {},
            "sets": writer.sets if writer else {},
            "forward": runner.forward_seconds - forward,
            "metric": runner.metric_seconds - metric,
        }


def score_on_ray(
    runner: Any,
    cases: list[Case],
    work: list[int],
    set_hash: str,
    members: list[VariantSpec],
    bases: dict[int, Any],
    writer: BaselineWriter | None,
) -> Iterator[tuple[int, Any]]:
    """(case index, record) for every index of `work`, in its order, scored by actors."""
    options = runner.options
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
            wanted=len(work),
        )
        count = len(actors)
        size = max(1, -(-len(work) // (count * BATCHES_PER_ACTOR)))
        batches = [work[i : i + size] for i in range(0, len(work), size)]
        pool = ActorPool(actors)
        topk = writer.topk if writer is not None else None
        for batch in batches:
            pool.submit(
                lambda a, b: a.score.remote(
                    [(i, cases[i]) for i in b],
                    set_hash,
                    members,
                    {i: bases[i] for i in b if i in bases},
                    topk,
                ),
                batch,
            )
        with progress.progress(
            f"scoring {len(work)} cases on {count} Ray actors", total=len(work)
        ) as bar:
            for batch in batches:
                result = pool.get_next()
                results.append(result)
                bar.advance(len(batch))
    for result in results:
        runner.forward_seconds += result["forward"]
        runner.metric_seconds += result["metric"]
        if writer is not None:
            writer.tensors.update(result["tensors"])
            for key, count in result["sets"].items():
                writer.sets[key] = max(writer.sets.get(key, 0), count)
        yield from result["records"]
