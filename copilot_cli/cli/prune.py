"""`copilot-opt prune`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from copilot_cli.cli.common import JsonOpt, handle_errors, option, print_json, stderr_console
from copilot_cli.cli.model_options import AllowDownloadOpt, DeviceOpt, ModelOpt, model_spec
from copilot_cli.core import progress
from copilot_cli.core.errors import InputError


def _read(source: str) -> str:
    where = "stdin" if source == "-" else source
    try:
        data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except FileNotFoundError:
        raise InputError("file does not exist", where=where) from None
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", where=where) from exc
    if b"\0" in data[:8192]:
        raise InputError("binary input (NUL bytes); prune takes text", where=where)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text ({exc.reason})", where=where) from exc


@handle_errors
def prune_command(
    input_path: Annotated[str, typer.Argument(metavar="INPUT", help="Text file, or - for stdin.")],
    model: ModelOpt = "",
    rate: Annotated[float | None, option("--rate", help="Share of tokens kept, in (0, 1].")] = None,
    target_tokens: Annotated[
        int | None, option("--target-tokens", help="Keep about this many tokens.")
    ] = None,
    threshold: Annotated[
        float | None,
        option(
            "--threshold",
            help="Keep tokens scoring at least this: a percentile in [0, 1] (entropy, "
            "attention, hybrid) or a multiple of the running level (ewma; 1.2 without any "
            "of --rate/--target-tokens/--threshold).",
        ),
    ] = None,
    method: Annotated[
        str, option("--method", help="entropy, attention, hybrid or ewma.")
    ] = "hybrid",
    protect: Annotated[
        list[str] | None, option("--protect", help="Regex of text never removed (repeatable).")
    ] = None,
    language: Annotated[
        str | None,
        option(
            "--language",
            help="python, go, rust, typescript, tsx, javascript, java, c, cpp, or text "
            "(default: from the file extension, else detected).",
        ),
    ] = None,
    out: Annotated[Path | None, option("--out", "-o", help="Write the result here.")] = None,
    device: DeviceOpt = "cpu",
    allow_download: AllowDownloadOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """Compress a prompt or context file, keeping protected spans and code validity."""
    from copilot_cli.core.artifacts import write_bytes
    from copilot_cli.core.models import load_model
    from copilot_cli.core.syntax import EXTENSIONS, PROSE
    from copilot_cli.prune import PruneOptions, prune

    if language is None and input_path != "-":
        suffix = Path(input_path).suffix.lower()
        language = EXTENSIONS.get(suffix) or ("text" if suffix in PROSE else None)
    options = PruneOptions(
        rate=rate,
        target_tokens=target_tokens,
        threshold=threshold,
        method=method,
        protect=tuple(protect or ()),
        language=language,
    )
    text = _read(input_path)
    if not text.strip():
        raise InputError("empty input", where=input_path)
    with progress.progress("loading model"):
        loaded = load_model(model_spec(model, device, "auto", allow_download))
    with progress.progress("scoring tokens"):
        result = prune(
            text,
            loaded.model,
            loaded.tokenizer,
            rate=options.rate,
            target_tokens=options.target_tokens,
            threshold=options.threshold,
            method=options.method,
            protect=options.protect,
            language=options.language,
        )
    if out is not None:
        write_bytes(out, result.text.encode("utf-8"))
    requested = result.requested_rate
    if requested and result.achieved_rate > requested * 1.05:
        stderr_console.print(
            f"note: kept {result.achieved_rate:.1%} of the tokens, not {requested:.1%}: the "
            "protected spans (names, numbers, negations, line breaks, --protect) are all kept",
            highlight=False,
        )
    if json_output:
        print_json(result.to_dict())
        return
    if out is None:
        sys.stdout.write(result.text)
    stderr_console.print(
        f"{result.original_tokens} -> {result.kept_tokens} tokens "
        f"({result.achieved_rate:.1%}, {result.mode})"
        + ("" if result.parses is None else f", parses: {'yes' if result.parses else 'NO'}")
        + (
            f", last {result.verbatim_tail} characters kept as they are"
            if result.verbatim_tail
            else ""
        ),
        highlight=False,
    )
