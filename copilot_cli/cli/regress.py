"""`copilot-opt regress`: the CI gate."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

from rich.table import Table

from copilot_cli.cli.common import handle_errors, option, stderr_console, stdout_console
from copilot_cli.cli.model_options import (
    AllowDownloadOpt,
    DeviceOpt,
    DtypeOpt,
    ModelOpt,
    model_spec,
)
from copilot_cli.core import progress
from copilot_cli.core.errors import CheckFailed, InputError
from copilot_cli.paths import DEFAULT_PROMPTS


def _pick(flag, config: dict, key: str, default):
    return flag if flag is not None else config.get(key, default)


@handle_errors
def regress_command(
    variant: Annotated[
        list[str] | None,
        option("--variant", "-v", help="NAME=KIND=ARG[+KIND=ARG] (kinds: quant, kv, kv-dtype)."),
    ] = None,
    model: ModelOpt = "",
    prompts: Annotated[Path | None, option("--prompts", help="Prompts JSONL.")] = None,
    config: Annotated[Path | None, option("--config", "-c", help="regress.yaml.")] = None,
    save_baseline: Annotated[
        Path | None, option("--save-baseline", help="Store the base model's log-probs here.")
    ] = None,
    baseline: Annotated[
        Path | None, option("--baseline", help="Reuse stored base log-probs.")
    ] = None,
    baseline_topk: Annotated[
        int | None, option("--baseline-topk", help="Store top-k log-probs (0 = full vocab).")
    ] = None,
    max_mean_kl: Annotated[float | None, option("--max-mean-kl", help="Default 1e-3.")] = None,
    min_same_top1: Annotated[float | None, option("--min-same-top1", help="Default 0.99.")] = None,
    max_prompt_kl: Annotated[float | None, option("--max-prompt-kl", help="Default 1e-2.")] = None,
    gen_tokens: Annotated[
        int | None, option("--gen-tokens", help="Greedy tokens per continuation (default 16).")
    ] = None,
    max_tokens: Annotated[
        int | None, option("--max-tokens", help="Tokens per prompt (default 256).")
    ] = None,
    null_control: Annotated[
        bool, option("--null-control", help="Also run base vs base (the noise floor).")
    ] = False,
    json_path: Annotated[
        str | None, option("--json", help="Write the JSON report here (- for stdout).")
    ] = None,
    junit: Annotated[Path | None, option("--junit", help="Write JUnit XML here.")] = None,
    markdown_path: Annotated[
        Path | None, option("--markdown", help="Write the Markdown summary here.")
    ] = None,
    html_path: Annotated[Path | None, option("--html", help="Write the HTML report here.")] = None,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "auto",
    allow_download: AllowDownloadOpt = False,
) -> None:
    """Compare optimized variants with the original model; exit 1 when a threshold fails."""
    from copilot_cli.core.artifacts import write_bytes
    from copilot_cli.core.models import load_model
    from copilot_cli.regress import RegressOptions, Thresholds, parse_variant, run_regress
    from copilot_cli.regress.config import load_regress_config
    from copilot_cli.regress.reports import html_report, junit_xml, markdown, to_json

    cfg = load_regress_config(config) if config is not None else {}
    limits = cfg.get("thresholds", {})
    defaults = Thresholds()
    flags = {
        "max_mean_kl": max_mean_kl,
        "min_same_top1": min_same_top1,
        "max_prompt_kl": max_prompt_kl,
    }
    try:
        thresholds = Thresholds(
            max_mean_kl=_pick(max_mean_kl, limits, "max_mean_kl", defaults.max_mean_kl),
            min_same_top1=_pick(min_same_top1, limits, "min_same_top1", defaults.min_same_top1),
            max_prompt_kl=_pick(max_prompt_kl, limits, "max_prompt_kl", defaults.max_prompt_kl),
            min_exact_match=limits.get("min_exact_match"),
            min_bleu=limits.get("min_bleu"),
        )
    except InputError as exc:
        field = exc.where or ""
        where = (
            ("--" + field.replace("_", "-"))
            if flags.get(field) is not None
            else (f"{config}: thresholds.{field}")
        )
        raise InputError(exc.message, where=where) from None
    specs = tuple(parse_variant(v) for v in (variant or cfg.get("variants", [])))
    options = RegressOptions(
        prompts=prompts or Path(cfg.get("prompts", DEFAULT_PROMPTS)),
        variants=specs,
        thresholds=thresholds,
        gen_tokens=_pick(gen_tokens, cfg, "gen_tokens", 16),
        max_tokens=_pick(max_tokens, cfg, "max_tokens", 256),
        baseline=baseline,
        save_baseline=save_baseline,
        baseline_topk=_pick(baseline_topk, cfg, "baseline_topk", 0),
        null_control=null_control or bool(cfg.get("null_control", False)),
    )
    with progress.progress("loading model"):
        loaded = load_model(model_spec(model, device, dtype, allow_download))
    with progress.progress(f"scoring {len(specs)} variants"):
        result = run_regress(loaded, options)
    reports = {junit: junit_xml, markdown_path: markdown, html_path: html_report}
    for path, render in reports.items():
        if path is not None:
            write_bytes(path, render(result).encode("utf-8"))
    if json_path == "-":
        sys.stdout.write(to_json(result))
    else:
        if json_path:
            write_bytes(Path(json_path), to_json(result).encode("utf-8"))
        _print(result)
    if not result.passed:
        failed = [v.name for v in result.variants if not v.passed]
        raise CheckFailed(f"regression in {', '.join(failed)}")


def _print(result) -> None:
    from copilot_cli.regress.reports import summary_line

    table = Table(title="regress", title_justify="left")
    columns = (
        ["variant", "positions", *summary_line(result.variants[0].summary), "greedy", "result"]
        if result.variants
        else []
    )
    for column in columns:
        table.add_column(column)
    for v in result.variants:
        gen = v.generation
        gen_text = (
            f"{gen['exact_match']:.0%} exact, BLEU {gen['bleu4']:.3f}, Lev {gen['levenshtein']:.3f}"
            if gen
            else "-"
        )
        table.add_row(
            v.name,
            str(v.summary.positions),
            *summary_line(v.summary).values(),
            gen_text,
            "pass" if v.passed else "[red]FAIL[/]",
        )
    stdout_console.print(table)
    worst = Table(title="worst positions", title_justify="left")
    for column in ("variant", "prompt", "pos", "KL", "context", "base → variant"):
        worst.add_column(column)
    for v in result.variants:
        for w in v.worst[:5]:
            worst.add_row(
                v.name,
                w["case"],
                str(w["position"]),
                f"{w['kl']:.3g}",
                repr(w["context"][-40:]),
                f"{w['base_top']!r} → {w['variant_top']!r}",
            )
    stdout_console.print(worst)
    for v in result.variants:
        if v.failures:
            stderr_console.print(f"[red]{v.name}[/]: " + "; ".join(v.failures), highlight=False)
    timing = result.timing
    stdout_console.print(
        f"forward {timing['forward_seconds']}s, metrics "
        f"{timing['metric_seconds']}s ({timing['metric_share']:.1%} of forward)"
        + (f"; baseline saved to {result.baseline_saved}" if result.baseline_saved else "")
    )
