"""`copilot-opt regress`: the CI gate."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

from copilot_cli import regress
from copilot_cli.cli.common import option
from copilot_cli.cli.errors import handle_errors
from copilot_cli.cli.params import (
    ALLOW_DOWNLOAD,
    ALLOW_LAX,
    DEVICE,
    DTYPE,
    MODEL,
    RayOpt,
    from_options,
    model_spec,
)
from copilot_cli.core import lazy
from copilot_cli.regress.options import RegressOptions, ReportPaths, Thresholds

view = lazy.module("copilot_cli.cli.views.regress")
reports = lazy.module("copilot_cli.regress.reports")

# flags whose value is the option of the same name (the rest are mapped below)
SAME_NAMED = ("prompts", "gen_tokens", "max_tokens", "baseline", "save_baseline")
SAME_NAMED += ("baseline_topk", "baseline_check", "batch_size")
THRESHOLDS = ("max_mean_kl", "min_same_top1", "max_prompt_kl")  # + allow_lax


@handle_errors
def regress_command(
    variants: list[str] | None = from_options(RegressOptions, "variants", "-v", default=None),
    engine: str | None = from_options(RegressOptions, "engine", default=None),
    original: str | None = from_options(RegressOptions, "original"),
    model: str = MODEL,
    prompts: Path | None = from_options(RegressOptions, "prompts", default=None),
    config: Annotated[Path | None, option("--config", "-c", help="regress.yaml.")] = None,
    save_baseline: Path | None = from_options(RegressOptions, "save_baseline"),
    baseline: Path | None = from_options(RegressOptions, "baseline"),
    baseline_topk: int | None = from_options(RegressOptions, "baseline_topk", default=None),
    baseline_check: int | None = from_options(RegressOptions, "baseline_check", default=None),
    max_mean_kl: float | None = from_options(Thresholds, "max_mean_kl", default=None),
    min_same_top1: float | None = from_options(Thresholds, "min_same_top1", default=None),
    max_prompt_kl: float | None = from_options(Thresholds, "max_prompt_kl", default=None),
    allow_lax: bool = ALLOW_LAX,
    gen_tokens: int | None = from_options(RegressOptions, "gen_tokens", default=None),
    max_tokens: int | None = from_options(RegressOptions, "max_tokens", default=None),
    batch_size: int | None = from_options(RegressOptions, "batch_size", default=None),
    null_control: bool = from_options(RegressOptions, "null_control"),
    json: str | None = from_options(ReportPaths, "json"),
    junit: Path | None = from_options(ReportPaths, "junit"),
    markdown: Path | None = from_options(ReportPaths, "markdown"),
    html: Path | None = from_options(ReportPaths, "html"),
    device: str = DEVICE,
    dtype: str = DTYPE,
    allow_download: bool = ALLOW_DOWNLOAD,
    ray: RayOpt = None,
) -> None:
    """Compare optimized variants with the original model; exit 1 when a threshold fails."""
    flags, to_stdout = dict(locals(), allow_lax=allow_lax or None), json == "-"
    json_file = None if to_stdout or not json else Path(json)
    options = regress.regress_options(
        config,
        {
            **{name: flags[name] for name in SAME_NAMED},
            "variants": tuple(variants) if variants else None,
            "thresholds": {name: flags[name] for name in (*THRESHOLDS, "allow_lax")},
            "null_control": null_control or None,
            "reports": ReportPaths(json=json_file, junit=junit, markdown=markdown, html=html),
            "model": model_spec(model, device, dtype, allow_download),
            "ray": ray,
            "engine": engine,
            "original": original,
        },
    )
    result = regress.run_regress(options)
    if to_stdout:
        sys.stdout.write(reports.to_json(result))
    else:
        view.show(result)
    result.raise_for_failures()
