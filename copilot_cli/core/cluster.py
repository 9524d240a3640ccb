"""Running work on a Ray cluster: join one (or start one here), fan work out, one progress bar.

Ray is optional (`pip install -e ".[ray]"`, or `make ray-env`); nothing imports it until a run
asks for it. A target is `local` (a Ray instance started on this machine for the run, stopped
after it), `auto` (the cluster this machine belongs to, as `ray start` set it up) or an address
(`HOST:PORT` of a head node, or `ray://HOST:PORT` for Ray Client).

Work reaches the cluster only through `core/executor.py` (`OnRay`): actors each hold one
worker, units go to the least loaded one, and results come back to the caller, which writes
every artifact itself: workers need no shared filesystem for outputs, and the merge is the one
a local run does. Actors are restarted and their calls retried by Ray when a worker dies
(`RETRIES`); every unit of work is a pure function of its inputs, so a retried one returns the
same bytes.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import re
import signal
import socket
import sys
from collections.abc import Iterator
from typing import Any

from copilot_cli.core.errors import InputError
from copilot_cli.core.options import OptionError

INSTALL_HINT = 'Ray is not installed here: pip install -e ".[ray]" (or make ray-env)'
RETRIES = 3
_ADDRESS = re.compile(r"^(ray://)?[A-Za-z0-9_.\-\[\]:]+:\d{1,5}$")
# Fault injection for tests and cluster drills: a worker whose task finds this file missing
# creates it and kills itself with SIGKILL (once), so the retry path is exercised for real.
KILL_ONCE_ENV = "COPILOT_OPT_RAY_KILL_ONCE"
JOIN_TIMEOUT = 10.0  # seconds a head node's port has to accept a connection


def check_target(value: str) -> str | None:
    """Why `value` cannot be used as a Ray target here (None when it can): not a target, or
    Ray is not installed (said before any work starts)."""
    if not (value in ("local", "auto") or _ADDRESS.match(value)):
        return f"{value!r} is not local, auto, HOST:PORT or ray://HOST:PORT"

    if importlib.util.find_spec("ray") is None:
        return INSTALL_HINT
    return None


def require_target(value: str | None, option: str = "ray") -> None:
    """Refuse (OptionError naming `option`) a Ray target that cannot be used here."""
    if value is None:
        return
    why = check_target(value)
    if why is not None:
        raise OptionError(option, why)


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise InputError(INSTALL_HINT, where="--ray") from None
    return ray


@contextlib.contextmanager
def session(target: str) -> Iterator[Any]:
    """The `ray` module, connected to `target` for the duration (an already connected driver,
    such as a test's, is used as it is and left connected)."""

    verbose = logging.getLogger("copilot_cli").isEnabledFor(logging.DEBUG)
    if not verbose:  # Ray's own C++ warnings (connection retries...) are not ours to print
        os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    if target not in ("local", "auto") and (why := unreachable(target)):
        raise InputError(f"cannot join the Ray cluster at {target}: {why}", where="--ray")
    kwargs: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": verbose,
        # Ray's start-up notes are not ours to print (shown with --debug)
        "logging_level": logging.INFO if verbose else logging.ERROR,
    }
    env = {k: v for k, v in os.environ.items() if k.startswith("COPILOT_OPT_")}
    kwargs["runtime_env"] = {"env_vars": env} if env else None
    try:
        with contextlib.nullcontext() if verbose else _native_stderr_silenced():
            if target == "local":
                ray.init(num_cpus=os.cpu_count() or 1, **kwargs)
            else:
                ray.init(address=target, **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise InputError(f"cannot join the Ray cluster at {target}: {exc}", where="--ray") from None
    try:
        yield ray
    finally:
        ray.shutdown()


@contextlib.contextmanager
def _native_stderr_silenced() -> Iterator[None]:
    """File descriptor 2 sent to /dev/null while Ray starts: its C++ core prints a line about
    its own log level there, whatever the level (Python's sys.stderr is flushed first)."""

    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def unreachable(target: str, timeout: float = JOIN_TIMEOUT) -> str | None:
    """Why the head node at `target` (HOST:PORT or ray://HOST:PORT) cannot be reached (None
    when a TCP connection opens): said at once, where Ray would retry for minutes."""

    host, _, port = target.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return None
    except OSError as exc:
        return exc.strerror or type(exc).__name__


def workers(ray: Any, *, gpus: bool = False) -> int:
    """How many one-CPU (or one-GPU) workers the cluster can run at once."""
    resources = ray.cluster_resources()
    return max(1, int(resources.get("GPU" if gpus else "CPU", 1)))


def maybe_die_once() -> None:
    """Fault injection (see KILL_ONCE_ENV): SIGKILL this worker the first time only."""
    marker = os.environ.get(KILL_ONCE_ENV)
    if not marker:
        return
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.close(fd)

    os.kill(os.getpid(), signal.SIGKILL)


def replicas(ray: Any, threads: int, *, gpus: bool, wanted: int) -> int:
    """How many model replicas to start: one per GPU, or one per `threads` CPUs (each replica
    runs as many threads as the caller, so its kernels sum in the same order), at most
    `wanted`."""
    if gpus:
        count = workers(ray, gpus=True)
    else:
        count = max(1, int(ray.cluster_resources().get("CPU", 1)) // max(threads, 1))
    return max(1, min(count, wanted))


def start_replicas(
    ray: Any,
    cls: type,
    args: tuple[Any, ...],
    threads: int,
    *,
    gpus: bool,
    fingerprint: str | None,
    wanted: int,
) -> list[Any]:
    """`replicas(...)` actors of `cls(*args)` (restarted and their calls retried when a worker
    dies), each checked to hold the model with `fingerprint` (its `fingerprint()` method) when
    one is given."""
    count = replicas(ray, threads, gpus=gpus, wanted=wanted)
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    actor = ray.remote(
        num_cpus=min(threads, cpus),
        num_gpus=1 if gpus else 0,
        max_restarts=RETRIES,
        max_task_retries=RETRIES,
    )(cls)
    actors = [actor.remote(*args) for _ in range(count)]
    if fingerprint is None:
        return actors
    for found in ray.get([a.fingerprint.remote() for a in actors]):
        if found != fingerprint:
            raise InputError(
                f"a Ray worker loaded another model ({found[:16]}; here {fingerprint[:16]}): the "
                "model path must name the same files on every node",
                where="--ray",
            )
    return actors
