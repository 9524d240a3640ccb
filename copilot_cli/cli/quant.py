"""`copilot-opt quantize`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from copilot_cli import quant
from copilot_cli.cli.common import JsonOpt, option, print_json, warn
from copilot_cli.cli.errors import handle_errors
from copilot_cli.cli.params import ALLOW_DOWNLOAD, DEVICE, DTYPE, MODEL, from_options, model_spec
from copilot_cli.core import lazy
from copilot_cli.quant.options import QuantizeOptions

view = lazy.module("copilot_cli.cli.views.quant")


@handle_errors
def quantize_command(
    out: Path = from_options(QuantizeOptions, "out", "-o"),
    model: str = MODEL,
    bits: int = from_options(QuantizeOptions, "bits"),
    group_size: int = from_options(QuantizeOptions, "group_size"),
    int8_scales: str = from_options(QuantizeOptions, "int8_scales"),
    keep_fp16: int | None = from_options(QuantizeOptions, "keep_fp16"),
    keep_coverage: float | None = from_options(QuantizeOptions, "keep_coverage"),
    corpus: list[Path] | None = from_options(QuantizeOptions, "corpus", default=None),
    include_lm_head: bool = from_options(QuantizeOptions, "include_lm_head"),
    prompts: Path = from_options(QuantizeOptions, "prompts"),
    no_fidelity: Annotated[bool, option("--no-fidelity", help="Skip the fidelity check.")] = False,
    export: list[str] | None = from_options(QuantizeOptions, "export", default=None),
    gguf: Path | None = from_options(QuantizeOptions, "gguf"),
    dtype: str = DTYPE,
    device: str = DEVICE,
    allow_download: bool = ALLOW_DOWNLOAD,
    json_output: JsonOpt = False,
) -> None:
    """Quantize the embedding table to INT8/INT4, keeping the most used rows in FP16."""
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
    result = quant.quantize_embeddings(options)
    for message in result.warnings:
        warn(message)
    if json_output:
        print_json(result.report.to_dict())
    else:
        view.show(result)
