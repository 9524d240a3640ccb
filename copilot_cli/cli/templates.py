"""`copilot-opt compile-templates` and `copilot-opt render`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from copilot_cli.cli.common import (
    JsonOpt,
    handle_errors,
    option,
    print_json,
    stderr_console,
    stdout_console,
)
from copilot_cli.cli.model_options import AllowDownloadOpt
from copilot_cli.core import progress
from copilot_cli.core.errors import FingerprintMismatch, InputError

TokenizerOpt = Annotated[
    str,
    option(
        "--tokenizer",
        "--model",
        "-m",
        help="Tokenizer (or model) folder for token counts and boundary checks "
        "(default: the shipped model's).",
    ),
]


def _tokenizer(name: str, allow_download: bool) -> Any:
    from copilot_cli.core.models import default_model, load_tokenizer

    with progress.progress("loading tokenizer"):
        return load_tokenizer(name or default_model(), allow_download=allow_download)


@handle_errors
def compile_templates_command(
    src: Annotated[Path, typer.Argument(help="Template folder.")] = Path("templates"),
    out: Annotated[Path, option("--out", "-o", help="Bundle folder to write.")] = Path(
        "build/templates"
    ),
    tokenizer: TokenizerOpt = "",
    no_tokenizer: Annotated[
        bool, option("--no-tokenizer", help="Skip token counts and boundary checks.")
    ] = False,
    min_prefix_tokens: Annotated[
        int, option("--min-prefix-tokens", help="Warn below this prefix length.")
    ] = 64,
    allow_download: AllowDownloadOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """Validate and precompile prompt templates into a bundle with static prefixes."""
    from copilot_cli.prompts import CompileOptions, compile_templates

    options = CompileOptions(src=src, out=out, min_prefix_tokens=min_prefix_tokens)
    loaded = None if no_tokenizer else _tokenizer(tokenizer, allow_download)
    with progress.progress("compiling templates"):
        result = compile_templates(options, loaded)
    for warning in result.warnings:
        stderr_console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    if json_output:
        print_json(result.to_dict())
        return
    table = Table(title=f"bundle {result.out}", title_justify="left")
    columns = ("template", "status", "prefix chars", "prefix tokens", "boundary cut", "variables")
    for column in columns:
        table.add_column(column)
    for t in result.templates:
        tokens = "-" if t.static_prefix_tokens is None else str(t.static_prefix_tokens)
        table.add_row(
            t.name,
            t.status,
            str(t.static_prefix_chars),
            tokens,
            str(t.shortened_chars),
            ", ".join(t.variables),
        )
    stdout_console.print(table)
    stdout_console.print(
        f"{len(result.templates)} templates, {len(result.parts)} parts, "
        f"{len(result.files_written)} files written",
        markup=False,
    )
    for link, target in result.links.items():
        stdout_console.print(f"read through link {link} -> {target}", markup=False, highlight=False)


def _read_inputs(source: str) -> dict[str, Any]:
    where = "stdin" if source == "-" else source
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read inputs ({exc.strerror})", where=where) from exc
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InputError(f"inputs are not valid JSON ({exc})", where=where) from exc
    if not isinstance(value, dict):
        raise InputError("inputs must be a JSON object", where=where)
    return value


@handle_errors
def render_command(
    bundle: Annotated[Path, typer.Argument(help="Bundle folder written by compile-templates.")],
    name: Annotated[str, typer.Argument(help="Template name.")],
    inputs: Annotated[
        str, option("--inputs", "-i", help="JSON file with the inputs, or - for stdin.")
    ],
    tokenizer: TokenizerOpt = "",
    allow_download: AllowDownloadOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """Render one template of a bundle with the given inputs."""
    from copilot_cli.core.fingerprints import tokenizer_fingerprint
    from copilot_cli.core.tokens import continuation_ids, prompt_ids
    from copilot_cli.prompts import load_bundle

    loaded = load_bundle(bundle)
    rendered = loaded.split(name, **_read_inputs(inputs))
    if not json_output:
        sys.stdout.write(rendered.text)
        return
    payload: dict[str, Any] = {
        "template": name,
        "text": rendered.text,
        "static_prefix": rendered.static_prefix,
        "rest": rendered.rest,
    }
    tok = _tokenizer(tokenizer, allow_download)
    expected = loaded.tokenizer_fingerprint
    found = tokenizer_fingerprint(tok)
    if expected and expected != found:
        raise FingerprintMismatch("tokenizer", expected=found, found=expected, where=str(bundle))
    add_special = loaded.entry(name)["format"] == "text"
    prefix_ids = prompt_ids(tok, rendered.static_prefix, add_special=add_special)
    payload.update(
        prefix_tokens=len(prefix_ids),
        rest_tokens=len(continuation_ids(tok, rendered.rest)),
        total_tokens=len(prompt_ids(tok, rendered.text, add_special=add_special)),
    )
    print_json(payload)
