"""Where a capability's units of work run: in this process, in local worker processes, or on a
Ray cluster, behind one small interface.

A capability describes its work as a `Work`: pure units, a worker built once wherever units
run (a model replica, a tokenizer's counter) and the function that runs one unit on it. An
executor runs them and returns the results in unit order; the merge stays with the capability,
in the calling process, which writes every artifact. A unit's result depends only on the unit
and the worker's inputs, so where it ran changes no byte of the output.

    with open_executor(options.ray, jobs) as executor:
        for result in executor.map(work):
            merge(result)

Units are consumed lazily (at most a bounded window in flight on other workers), so a
capability can read a unit's input while it builds it. A result that is an iterator is
consumed where it runs (a list comes back) except in this process, where it streams.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from copilot_cli.core import cluster, progress

U = TypeVar("U")
R = TypeVar("R")
IN_FLIGHT_PER_WORKER = 3  # units waiting per worker: no worker idles between two of its units


@dataclass(frozen=True)
class Work(Generic[U, R]):
    """What a capability hands an executor.

    `worker(*worker_args)` builds a worker's state, once per worker (module-level, picklable:
    it runs in other processes); `run(state, unit)` computes one unit's result there. `here`
    is this process's own state, used instead of building one when the work runs here (the
    model the caller already loaded). `fingerprint`, when set, is what every worker built
    elsewhere must report (`state.fingerprint()`): the same model on every node. `weight` is a
    unit's share of the progress bar (1 each by default; `total` is their sum when the units
    are a lazy iterable). `threads` and `gpus` are what one worker needs."""

    description: str
    units: Iterable[U]
    worker: Callable[..., Any]
    run: Callable[[Any, U], R]
    worker_args: tuple[Any, ...] = ()
    here: Any = None
    fingerprint: str | None = None
    weight: Callable[[U], float] | None = None
    total: float | None = None
    threads: int = 1
    gpus: bool = False
    max_workers: int | None = None


class Executor(Protocol):
    def workers(self, threads: int = 1, gpus: bool = False) -> int:
        """How many workers of `threads` CPUs (or one GPU each) run units at once."""
        ...

    def map(self, work: Work[U, R]) -> Iterator[R]:
        """The result of every unit, in unit order."""
        ...


def _weights(work: Work[U, R]) -> tuple[Callable[[U], float], float | None]:
    weight = work.weight or (lambda _unit: 1.0)
    if work.total is not None:
        return weight, work.total
    if isinstance(work.units, list | tuple):
        return weight, float(sum(weight(u) for u in work.units))
    return weight, None


class Here:
    """Every unit in this process, one after another (a result that is an iterator streams)."""

    def workers(self, threads: int = 1, gpus: bool = False) -> int:
        return 1

    def map(self, work: Work[U, R]) -> Iterator[R]:
        state = work.here if work.here is not None else work.worker(*work.worker_args)
        for unit in work.units:
            yield work.run(state, unit)


_PROCESS_WORKER: dict[str, Any] = {}


def _start_process_worker(work: Work[Any, Any]) -> None:
    _PROCESS_WORKER["state"] = work.worker(*work.worker_args)
    _PROCESS_WORKER["run"] = work.run


def _run_in_process_worker(unit: Any) -> Any:
    return _materialized(_PROCESS_WORKER["run"](_PROCESS_WORKER["state"], unit))


def _materialized(result: Any) -> Any:
    return list(result) if isinstance(result, Iterator) else result


class Processes:
    """Units in `jobs` local worker processes (fork-free: each builds its own worker)."""

    def __init__(self, jobs: int) -> None:
        self.jobs = max(1, jobs)

    def workers(self, threads: int = 1, gpus: bool = False) -> int:
        return max(1, self.jobs // max(threads, 1))

    def map(self, work: Work[U, R]) -> Iterator[R]:
        # the worker description travels without the units (they go one by one)
        shipped = Work(work.description, (), work.worker, work.run, work.worker_args)
        with ProcessPoolExecutor(
            self.workers(work.threads), initializer=_start_process_worker, initargs=(shipped,)
        ) as pool:
            submit = lambda unit: pool.submit(_run_in_process_worker, unit)  # noqa: E731
            yield from _windowed(work, self.workers(work.threads), submit)


def _windowed(work: Work[U, R], workers: int, submit: Callable[[U], Future[R]]) -> Iterator[R]:
    """Results in unit order, at most IN_FLIGHT_PER_WORKER units per worker submitted ahead."""
    weight, total = _weights(work)
    window = IN_FLIGHT_PER_WORKER * workers
    pending: deque[tuple[U, Future[R]]] = deque()
    with progress.progress(work.description, total=total) as bar:
        for unit in work.units:
            pending.append((unit, submit(unit)))
            while len(pending) >= window:
                done, future = pending.popleft()
                yield future.result()
                bar.advance(weight(done))
        while pending:
            done, future = pending.popleft()
            yield future.result()
            bar.advance(weight(done))


class Replica:
    """A worker on a Ray node: built once (restarted by Ray when its process dies), then units."""

    def __init__(self, work: Work[Any, Any]) -> None:
        self.state = work.worker(*work.worker_args)
        self.run_unit = work.run

    def fingerprint(self) -> str:
        return self.state.fingerprint()

    def run(self, unit: Any) -> Any:
        cluster.maybe_die_once()
        return _materialized(self.run_unit(self.state, unit))


class OnRay:
    """Units spread over Ray actors, each holding one worker, for as long as the session."""

    def __init__(self, ray: Any) -> None:
        self.ray = ray

    def workers(self, threads: int = 1, gpus: bool = False) -> int:
        return cluster.replicas(self.ray, threads, gpus=gpus, wanted=1 << 30)

    def map(self, work: Work[U, R]) -> Iterator[R]:
        ray = self.ray
        shipped = Work(work.description, (), work.worker, work.run, work.worker_args)
        wanted = work.max_workers or (1 << 30)
        actors = cluster.start_replicas(
            ray,
            Replica,
            (shipped,),
            work.threads,
            gpus=work.gpus,
            fingerprint=work.fingerprint,
            wanted=wanted,
        )
        given: list[list[Future[R]]] = [[] for _ in actors]

        def submit(unit: U) -> Future[R]:
            # the actor with the fewest unfinished units (a slow unit does not hold up others)
            for futures in given:
                futures[:] = [f for f in futures if not f.done()]
            n = min(range(len(actors)), key=lambda i: len(given[i]))
            future = actors[n].run.remote(unit).future()
            given[n].append(future)
            return future

        yield from _windowed(work, len(actors), submit)


@contextlib.contextmanager
def open_executor(ray: str | None = None, jobs: int = 1) -> Iterator[Executor]:
    """On the Ray cluster `ray` names (joined for the duration), in `jobs` local processes, or
    (jobs 1) here."""
    if ray is not None:
        with cluster.session(ray) as connected:
            yield OnRay(connected)
        return
    yield Processes(jobs) if jobs > 1 else Here()
