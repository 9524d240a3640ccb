"""build: run the pipeline as a graph of content-hashed steps, skipping what did not change."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from copilot_cli.core import cluster
from copilot_cli.core.errors import CheckFailed
from copilot_cli.core.outputs import claim_folder, mark
from copilot_cli.pipeline.config import load_build_config
from copilot_cli.pipeline.lock import build_lock
from copilot_cli.pipeline.manifest import FORMAT as MANIFEST_FORMAT
from copilot_cli.pipeline.manifest import NAME as MANIFEST_NAME
from copilot_cli.pipeline.manifest import Manifest, digest, tree_hashes
from copilot_cli.pipeline.options import BuildOptions
from copilot_cli.pipeline.steps import Context, Step, StepOutcome, make_steps


@dataclass
class StepReport:
    name: str
    action: str  # "run" | "skip" | "ran" | "skipped" | "failed"
    reason: str
    seconds: float = 0.0
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass
class BuildResult:
    out: Path
    steps: list[StepReport]
    verdict: str | None  # "pass" | "fail" | None (no gate ran on these artifacts)
    manifest: Path
    warnings: list[str] = field(default_factory=list)

    def raise_for_failures(self) -> None:
        """Raise CheckFailed (exit 1) when the gate failed."""
        if self.verdict == "fail":
            raise CheckFailed(f"regress found a regression (see {self.out}/reports/regress.html)")

    def to_dict(self) -> dict[str, Any]:
        return {
            "out": str(self.out),
            "verdict": self.verdict,
            "manifest": str(self.manifest),
            "steps": [s.__dict__ for s in self.steps],
        }


def _outputs(step: Step, out: Path) -> dict[str, str]:
    """sha256 of every file the step wrote, keyed by its path relative to the build folder
    (absolute for an output the config put elsewhere): what `inspect` checks, file by file."""
    hashes: dict[str, str] = {}
    root = Path(os.path.abspath(out))
    for path in step.outputs:
        if not path.exists():
            continue
        where = Path(os.path.abspath(path))
        base = where.relative_to(root).as_posix() if where.is_relative_to(root) else str(where)
        for rel, sha in tree_hashes(path).items():
            hashes[f"{base}/{rel}" if path.is_dir() else base] = sha
    return hashes


def _why(
    step: Step,
    out: Path,
    previous: dict[str, Any] | None,
    inputs: dict[str, Any],
    force: bool,
    upstream_runs: list[str],
) -> str | None:
    """Why the step must run (None: it can be skipped)."""
    if force:
        return "--force"
    if previous is None:
        return "never built"
    ran = [n for n in upstream_runs if n in step.needs]
    if ran:
        return f"{', '.join(ran)} will run"
    old = previous.get("inputs", {})
    changed = sorted(k for k in set(old) | set(inputs) if old.get(k) != inputs.get(k))
    if changed:
        return f"inputs changed: {', '.join(changed)}"
    if previous.get("outputs") != _outputs(step, out):
        return "outputs missing or modified"
    return None


def run_build(options: BuildOptions) -> BuildResult:
    """Run (or with dry_run, plan) the pipeline described by the config.

    Each finished step is recorded in build-manifest.json at once, so an interrupted build
    resumes from the steps that finished, and a failing step leaves the last good record. The
    manifest's verdict is cleared before anything changes and set only when the gate has judged
    the artifacts beside it.

    Raises:
        InputError: a bad config (naming the key and line) or missing inputs.
        BuildLocked: another build is running on the same output folder.
        CheckFailed: a step's check failed (prefill-kv verify): exit 1.
    """
    config = load_build_config(options.config, options.out)
    ctx = Context(config, options.out, Manifest(options.out).data.get("models"))
    steps = make_steps(config)
    if options.dry_run:
        return _plan(options, steps, ctx)
    claim_folder(options.out, "out", fmt=MANIFEST_FORMAT, manifest=MANIFEST_NAME, label="build")
    with build_lock(options.out):
        mark(options.out, MANIFEST_FORMAT)
        manifest = Manifest(options.out)
        manifest.data["config"] = str(options.config.resolve())
        manifest.data["verdict"] = None  # until the gate judges what this build leaves
        manifest.save()
        reports: list[StepReport] = []
        ran: list[str] = []
        verdicts: list[str] = []
        with _Executor(config.raw["executor"].get("ray")) as executor:
            for step in steps:
                report, verdict = _step(step, ctx, manifest, options.force, ran, executor)
                reports.append(report)
                if verdict is not None:
                    verdicts.append(verdict)
        verdict = None if not verdicts else ("fail" if "fail" in verdicts else "pass")
        manifest.data["verdict"] = verdict
        manifest.data["models"] = ctx.models or manifest.data.get("models", {})
        manifest.data["inputs_hash"] = digest(
            {n: s.get("inputs_hash") for n, s in sorted(manifest.data["steps"].items())}
        )
        manifest.save()
    warnings = [manifest.warning] if manifest.warning else []
    return BuildResult(options.out, reports, verdict, manifest.path, warnings)


class _Executor(contextlib.ExitStack):
    """The one Ray session every step of a build shares (`executor.ray`), joined when the
    first step runs (a build with nothing to do starts no cluster)."""

    def __init__(self, target: str | None) -> None:
        super().__init__()
        self.target = target
        self.joined = False

    def before_run(self) -> None:
        if self.target is not None and not self.joined:
            self.enter_context(cluster.session(self.target))
            self.joined = True


def _plan(options: BuildOptions, steps: list[Step], ctx: Context) -> BuildResult:
    manifest = Manifest(options.out)
    will_run: list[str] = []
    reports = []
    for step in steps:
        reason = _why(
            step, options.out, manifest.step(step.name), step.inputs(ctx), options.force, will_run
        )
        if reason:
            will_run.append(step.name)
        action = "run" if reason else "skip"
        reports.append(StepReport(step.name, action, reason or "inputs and outputs unchanged"))
    return BuildResult(options.out, reports, None, manifest.path)


def _step(
    step: Step,
    ctx: Context,
    manifest: Manifest,
    force: bool,
    ran: list[str],
    executor: _Executor,
) -> tuple[StepReport, str | None]:
    """Run or skip one step; record it; raise CheckFailed when its check failed."""
    previous = manifest.step(step.name)
    inputs = step.inputs(ctx)
    reason = _why(step, ctx.out, previous, inputs, force, ran)
    if reason is None:
        summary = previous.get("summary", {})
        report = StepReport(step.name, "skipped", "inputs and outputs unchanged", summary=summary)
        return report, previous.get("verdict")
    executor.before_run()
    started = time.perf_counter()
    outcome = step.run(ctx)
    seconds = time.perf_counter() - started
    _record(manifest, step, ctx, inputs, outcome, seconds)
    if outcome.failures:
        raise CheckFailed("; ".join(outcome.failures))
    ran.append(step.name)
    report = StepReport(step.name, "ran", reason, round(seconds, 3), outcome.summary)
    return report, outcome.verdict


def _record(
    manifest: Manifest,
    step: Step,
    ctx: Context,
    inputs: dict[str, Any],
    outcome: StepOutcome,
    seconds: float,
) -> None:
    entry = {
        "inputs": inputs,
        "inputs_hash": digest(inputs),
        "outputs": _outputs(step, ctx.out),
        "seconds": round(seconds, 3),
        "summary": {**outcome.summary, **({"passed": False} if outcome.failures else {})},
    }
    if outcome.verdict is not None:
        entry["verdict"] = outcome.verdict
    if outcome.failures:
        entry["failures"] = outcome.failures
        entry["inputs_hash"] = None  # a failed step is never skipped next time
        entry["inputs"] = {}
    manifest.record(step.name, entry)
