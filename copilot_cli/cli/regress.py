"""`copilot-opt regress`: the CI gate."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

from copilot_cli.cli.common import option
from copilot_cli.cli.errors import handle_errors
from copilot_cli.cli.params import (
    DEFAULT_DEVICE,
    AllowDownloadOpt,
    AllowLaxOpt,
    DeviceOpt,
    DtypeOpt,
    ModelOpt,
    RayOpt,
    count_option,
    model_spec,
    path_option,
)

# flags whose value is the option of the same name (the rest are mapped below)
SAME_NAMED = ("prompts", "gen_tokens", "max_tokens", "baseline", "save_baseline")
SAME_NAMED += ("baseline_topk", "baseline_check", "batch_size")
THRESHOLDS = ("max_mean_kl", "min_same_top1", "max_prompt_kl")  # + allow_lax


@handle_errors
def regress_command(
    variants: Annotated[
        list[str] | None,
        option(
            "--variant",
            "-v",
            help="NAME=KIND=ARG[+KIND=ARG] (quant, kv, kv-dtype, prune; --engine vllm: vllm, "
            "kv; --engine llama.cpp: llamacpp, kv).",
        ),
    ] = None,
    engine: Annotated[str | None, option("--engine", help="transformers|vllm|llama.cpp")] = None,
    original: Annotated[str | None, option("--original", help="engine or transformers.")] = None,
    model: ModelOpt = "",
    prompts: path_option("--prompts", "Prompts JSONL.") = None,
    config: Annotated[Path | None, option("--config", "-c", help="regress.yaml.")] = None,
    save_baseline: path_option("--save-baseline", "Store the base model's log-probs here.") = None,
    baseline: path_option("--baseline", "Reuse stored log-probs.") = None,
    baseline_topk: count_option("--baseline-topk", "Store top-k log-probs (0: all).") = None,
    baseline_check: count_option(
        "--baseline-check", "Cases recomputed to check a reused baseline (default 2; 0 = off)."
    ) = None,
    max_mean_kl: Annotated[float | None, option("--max-mean-kl", help="Default 1e-3.")] = None,
    min_same_top1: Annotated[float | None, option("--min-same-top1", help="Default 0.99.")] = None,
    max_prompt_kl: Annotated[float | None, option("--max-prompt-kl", help="Default 1e-2.")] = None,
    allow_lax: AllowLaxOpt = False,
    gen_tokens: count_option("--gen-tokens", "Greedy tokens per continuation (default 16).") = None,
    max_tokens: count_option("--max-tokens", "Tokens per prompt (default 256).") = None,
    batch_size: count_option("--batch-size", "Cases per batched forward (default 4).") = None,
    null_control: Annotated[
        bool, option("--null-control", help="Also run base vs base (the noise floor).")
    ] = False,
    json: Annotated[
        str | None, option("--json", help="Write the JSON report here (- for stdout).")
    ] = None,
    junit: path_option("--junit", "Write JUnit XML here.") = None,
    markdown: path_option("--markdown", "Write Markdown here.") = None,
    html: path_option("--html", "Write the HTML report here.") = None,
    device: DeviceOpt = DEFAULT_DEVICE,
    dtype: DtypeOpt = "auto",
    allow_download: AllowDownloadOpt = False,
    ray: RayOpt = None,
) -> None:
    """Compare optimized variants with the original model; exit 1 when a threshold fails."""
    from copilot_cli.cli.views.regress import show
    from copilot_cli.regress import ReportPaths, regress_options, run_regress
    from copilot_cli.regress.reports import to_json

    flags, to_stdout = dict(locals(), allow_lax=allow_lax or None), json == "-"
    json_file = None if to_stdout or not json else Path(json)
    options = regress_options(
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
    result = run_regress(options)
    if to_stdout:
        sys.stdout.write(to_json(result))
    else:
        show(result)
    result.raise_for_failures()
