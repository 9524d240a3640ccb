"""build: run the pipeline as a graph of content-hashed steps, skipping what did not change."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from copilot_cli.build.config import load_build_config
from copilot_cli.build.lock import build_lock
from copilot_cli.build.manifest import Manifest, digest, tree_hashes
from copilot_cli.build.steps import Context, Step, make_steps
from copilot_cli.core.errors import CheckFailed, InputError


@dataclass(frozen=True)
class BuildOptions:
    """Settings of build: the config file, the output folder, --force and --dry-run."""

    config: Path
    out: Path = Path("build")
    force: bool = False
    dry_run: bool = False

    def __post_init__(self) -> None:
        if not self.config.is_file():
            raise InputError("config file does not exist", where=str(self.config))


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
    verdict: str | None  # "pass" | "fail" | None (regress not run)
    manifest: Path

    def to_dict(self) -> dict[str, Any]:
        return {
            "out": str(self.out),
            "verdict": self.verdict,
            "manifest": str(self.manifest),
            "steps": [s.__dict__ for s in self.steps],
        }


def _outputs(step: Step) -> dict[str, str]:
    hashes: dict[str, str] = {}
    for path in step.outputs:
        if path.exists():
            for rel, sha in tree_hashes(path).items():
                hashes[f"{path.name}/{rel}" if path.is_dir() else path.name] = sha
    return hashes


def _why(
    step: Step,
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
    if previous.get("outputs") != _outputs(step):
        return "outputs missing or modified"
    return None


def run_build(options: BuildOptions) -> BuildResult:
    """Run (or with dry_run, plan) the pipeline described by the config.

    Each finished step is recorded in build-manifest.json at once, so an interrupted build
    resumes from the steps that finished, and a failing step leaves the last good record.

    Raises:
        InputError: a bad config (naming the key and line) or missing inputs.
        BuildLocked: another build is running on the same output folder.
        CheckFailed: regress found a regression, or prefill-kv --verify failed (exit 1).
    """
    config = load_build_config(options.config)
    out = options.out
    ctx = Context(config, out)
    steps = make_steps(ctx)
    reports: list[StepReport] = []
    if options.dry_run:
        manifest = Manifest(out)
        will_run: list[str] = []
        for step in steps:
            reason = _why(step, manifest.step(step.name), step.inputs(), options.force, will_run)
            if reason:
                will_run.append(step.name)
            reports.append(
                StepReport(
                    step.name, "run" if reason else "skip", reason or "inputs and outputs unchanged"
                )
            )
        return BuildResult(out, reports, None, manifest.path)

    with build_lock(out):
        manifest = Manifest(out)
        manifest.data["config"] = str(options.config.resolve())
        ran: list[str] = []
        verdict = None
        for step in steps:
            previous = manifest.step(step.name)
            inputs = step.inputs()
            reason = _why(step, previous, inputs, options.force, ran)
            if reason is None:
                reports.append(
                    StepReport(
                        step.name,
                        "skipped",
                        "inputs and outputs unchanged",
                        summary=previous.get("summary", {}),
                    )
                )
                if step.name == "regress":
                    verdict = "pass" if previous.get("summary", {}).get("passed") else "fail"
                continue
            started = time.perf_counter()
            try:
                summary = step.run()
            except CheckFailed as failure:
                if step.name != "regress" and step.name != "prefill-kv":
                    raise
                summary = {"passed": False, "error": str(failure)}
                _record(manifest, step, inputs, summary, time.perf_counter() - started)
                raise
            seconds = time.perf_counter() - started
            _record(manifest, step, inputs, summary, seconds)
            ran.append(step.name)
            reports.append(StepReport(step.name, "ran", reason, round(seconds, 3), summary))
            if step.name == "regress":
                verdict = "pass" if summary.get("passed") else "fail"
        manifest.data["verdict"] = verdict
        manifest.data["inputs_hash"] = digest(
            {n: s.get("inputs_hash") for n, s in sorted(manifest.data["steps"].items())}
        )
        manifest.save()
    return BuildResult(out, reports, verdict, manifest.path)


def _record(
    manifest: Manifest, step: Step, inputs: dict[str, Any], summary: dict[str, Any], seconds: float
) -> None:
    manifest.record(
        step.name,
        {
            "inputs": inputs,
            "inputs_hash": digest(inputs),
            "outputs": _outputs(step),
            "seconds": round(seconds, 3),
            "summary": summary,
        },
    )
