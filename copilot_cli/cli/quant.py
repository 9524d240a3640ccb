"""`copilot-opt quantize`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from rich.table import Table

from copilot_cli.cli.common import (
    JsonOpt,
    handle_errors,
    option,
    print_json,
    stderr_console,
    stdout_console,
)
from copilot_cli.cli.model_options import AllowDownloadOpt, DeviceOpt, ModelOpt, model_spec
from copilot_cli.core import progress
from copilot_cli.paths import DEFAULT_CORPUS, DEFAULT_PROMPTS


@handle_errors
def quantize_command(
    out: Annotated[Path, option("--out", "-o", help="Output folder.")] = Path("build/quant"),
    model: ModelOpt = "",
    bits: Annotated[int, option("--bits", help="8 (per-row scales) or 4 (group-wise).")] = 8,
    group_size: Annotated[int, option("--group-size", help="Columns per 4-bit scale.")] = 32,
    keep_fp16: Annotated[
        int | None, option("--keep-fp16", help="Keep the N most frequent rows in FP16.")
    ] = None,
    keep_coverage: Annotated[
        float | None,
        option("--keep-coverage", help="Keep the rows covering this share of corpus tokens."),
    ] = None,
    corpus: Annotated[
        list[Path] | None,
        option(
            "--corpus",
            help="File or folder for token frequencies (repeatable) "
            "(default: sample_data/repo and templates/).",
        ),
    ] = None,
    include_lm_head: Annotated[
        bool, option("--include-lm-head", help="Quantize the output projection too.")
    ] = False,
    prompts: Annotated[
        Path, option("--prompts", help="JSONL prompts for the logit-fidelity check.")
    ] = DEFAULT_PROMPTS,
    no_fidelity: Annotated[
        bool, option("--no-fidelity", help="Skip the logit-fidelity check.")
    ] = False,
    device: DeviceOpt = "cpu",
    allow_download: AllowDownloadOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """Quantize the embedding table to INT8/INT4, keeping the most used rows in FP16."""
    from copilot_cli.core.models import load_model
    from copilot_cli.quant import QuantizeOptions, quantize_embeddings

    options = QuantizeOptions(
        out=out,
        bits=bits,
        group_size=group_size,
        keep_fp16=keep_fp16,
        keep_coverage=keep_coverage,
        corpus=tuple(corpus) if corpus else DEFAULT_CORPUS,
        include_lm_head=include_lm_head,
        prompts=None if no_fidelity else prompts,
    )
    with progress.progress("loading model"):
        loaded = load_model(model_spec(model, device, "auto", allow_download))
    with progress.progress("quantizing"):
        result = quantize_embeddings(loaded, options)
    for warning in result.warnings:
        stderr_console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    report = result.report
    if json_output:
        print_json(report)
        return
    memory, rows = report["memory"], report["rows"]
    table = Table(title=f"quantized embeddings {out}", title_justify="left", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row(
        "scheme",
        f"{report['scheme']} ({report['kept_rows']} rows in FP16, lm_head: {report['lm_head']})",
    )
    table.add_row(
        "bytes",
        f"{memory['fp16_bytes']:,} (fp16) -> {memory['quantized_bytes']:,} "
        f"= {memory['ratio_vs_fp16']:.3f}x, {memory['bits_per_weight']:.2f} bits/weight",
    )
    table.add_row(
        "row SQNR", f"mean {rows['sqnr_db_mean']:.1f} dB, min {rows['sqnr_db_min']:.1f} dB"
    )
    table.add_row("row cosine", f"mean {rows['cosine_mean']:.6f}, min {rows['cosine_min']:.6f}")
    table.add_row(
        "FP16 rows serve",
        f"{report['corpus']['fp16_token_share']:.1%} of "
        f"{report['corpus']['tokens']:,} corpus tokens",
    )
    if "logit_fidelity" in report:
        fid = report["logit_fidelity"]
        table.add_row(
            "logit fidelity",
            f"mean KL {fid['mean_kl']:.2e} ± {fid['kl_se']:.1e}, "
            f"same top-1 {fid['same_top1']:.2%} over {fid['positions']} positions",
        )
    stdout_console.print(table)
    worst = Table(title="10 worst rows", title_justify="left")
    for column in ("token id", "token", "cosine", "SQNR dB"):
        worst.add_column(column)
    for row in rows["worst_rows"]:
        worst.add_row(
            str(row["token_id"]),
            repr(row["token"]),
            f"{row['cosine']:.6f}",
            f"{row['sqnr_db']:.1f}",
        )
    stdout_console.print(worst)
