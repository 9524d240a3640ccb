"""The quantize report as tables."""

from __future__ import annotations

from rich.table import Table

from copilot_cli.cli.common import cell, stdout_console
from copilot_cli.quant.results import QuantizeResult


def show(result: QuantizeResult) -> None:
    report = result.report
    memory, rows = report.memory, report.rows
    table = Table(
        title=cell(f"quantized embeddings {result.out}"), title_justify="left", show_header=False
    )
    table.add_column(style="bold")
    table.add_column()
    table.add_row(
        "scheme", f"{report.scheme} ({report.kept_rows} rows in FP16, lm_head: {report.lm_head})"
    )
    table.add_row(
        "bytes",
        f"{memory.fp16_bytes:,} (fp16) -> {memory.quantized_bytes:,} "
        f"= {memory.ratio_vs_fp16:.3f}x, {memory.bits_per_weight:.2f} bits/weight",
    )
    table.add_row("row SQNR", f"mean {rows.sqnr_db_mean:.1f} dB, min {rows.sqnr_db_min:.1f} dB")
    table.add_row("row cosine", f"mean {rows.cosine_mean:.6f}, min {rows.cosine_min:.6f}")
    table.add_row(
        "FP16 rows serve",
        f"{report.corpus.fp16_token_share:.1%} of {report.corpus.tokens:,} corpus tokens",
    )
    if report.logit_fidelity is not None:
        fid = report.logit_fidelity
        table.add_row(
            "logit fidelity",
            f"mean KL {fid.mean_kl:.2e} ± {fid.kl_se:.1e}, "
            f"same top-1 {fid.same_top1:.2%} over {fid.positions} positions",
        )
    for export in report.exports:
        tensors = ", ".join(
            f"{name} {t['type_before']} -> {t['type_after']} "
            f"({t['bytes_before']:,} -> {t['bytes_after']:,} bytes)"
            for name, t in export.tensors.items()
        )
        table.add_row(
            f"export {export.format}",
            cell(f"{export.path}: {tensors}; {export.kept_rows_note}; output: {export.output}"),
        )
    stdout_console.print(table)
    worst = Table(title="10 worst rows", title_justify="left")
    for column in ("token id", "token", "cosine", "SQNR dB"):
        worst.add_column(column)
    for row in rows.worst_rows:
        worst.add_row(
            str(row.token_id), cell(repr(row.token)), f"{row.cosine:.6f}", f"{row.sqnr_db:.1f}"
        )
    stdout_console.print(worst)
