"""`copilot-opt quantize`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from copilot_cli.cli.common import JsonOpt, option, print_json, warn
from copilot_cli.cli.errors import handle_errors
from copilot_cli.cli.params import (
    DEFAULT_DEVICE,
    AllowDownloadOpt,
    DeviceOpt,
    DtypeOpt,
    ModelOpt,
    model_spec,
)
from copilot_cli.paths import DEFAULT_PROMPTS


@handle_errors
def quantize_command(
    out: Annotated[Path, option("--out", "-o", help="Output folder.")] = Path("build/quant"),
    model: ModelOpt = "",
    bits: Annotated[int, option("--bits", help="8 (per-row scales) or 4 (group-wise).")] = 8,
    group_size: Annotated[int, option("--group-size", help="Columns per grouped scale.")] = 32,
    int8_scales: Annotated[
        str, option("--int8-scales", help="row or group (INT8: one scale per --group-size).")
    ] = "row",
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
            help="File or folder for token frequencies (repeatable; default: "
            "sample_data/repo and templates/).",
        ),
    ] = None,
    include_lm_head: Annotated[
        bool, option("--include-lm-head", help="Quantize the output projection too.")
    ] = False,
    prompts: Annotated[
        Path, option("--prompts", help="JSONL prompts for the logit-fidelity check.")
    ] = DEFAULT_PROMPTS,
    no_fidelity: Annotated[bool, option("--no-fidelity", help="Skip the fidelity check.")] = False,
    export: Annotated[
        list[str] | None,
        option("--export", help="Also write gguf and/or compressed-tensors (repeatable)."),
    ] = None,
    gguf: Annotated[
        Path | None, option("--gguf", help="The GGUF a gguf export starts from (a folder model).")
    ] = None,
    dtype: DtypeOpt = "auto",
    device: DeviceOpt = DEFAULT_DEVICE,
    allow_download: AllowDownloadOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """Quantize the embedding table to INT8/INT4, keeping the most used rows in FP16."""
    from copilot_cli.cli.views.quant import show
    from copilot_cli.quant import QuantizeOptions, quantize_embeddings

    options = QuantizeOptions(
        out=out,
        bits=bits,
        group_size=group_size,
        int8_scales=int8_scales,
        keep_fp16=keep_fp16,
        keep_coverage=keep_coverage,
        **({"corpus": tuple(corpus)} if corpus else {}),
        include_lm_head=include_lm_head,
        prompts=None if no_fidelity else prompts,
        export=tuple(export or ()),
        gguf=gguf,
        model=model_spec(model, device, dtype, allow_download),
    )
    result = quantize_embeddings(options)
    for message in result.warnings:
        warn(message)
    if json_output:
        print_json(result.report.to_dict())
    else:
        show(result)
