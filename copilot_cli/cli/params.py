"""Typer options: `from_options` (an option declared once, in its options class), the model's
options every model-loading command shares, and the shared CLI-only ones."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from copilot_cli.cli.common import envvar, option
from copilot_cli.core.modelspec import ModelSpec
from copilot_cli.core.options import default_of, flag_of, help_of
from copilot_cli.regress.options import Thresholds

_OWN: Any = object()  # from_options: the field's own default


def from_options(
    cls: type, name: str, *aliases: str, default: Any = _OWN, argument: bool = False, **kwargs: Any
) -> Any:
    """The Typer option of field `name` of options class `cls`, declared there once: its flag,
    help and default are the field's (`core.options.setting`), its variable follows the flag
    (per command: cli/envnames.py). `default` only where the flag's value is not the option's
    (None: unset, the options keep their own; a flag naming a string the library parses).
    A `--no-` flag of a switch that is on by default (`use_cache`, `--no-cache`) is off;
    `argument`: the command's positional argument, not a flag."""
    flag = flag_of(cls, name)
    text = help_of(cls, name)
    if text is None:
        raise TypeError(f"{cls.__name__}.{name} declares no help: setting(..., help=...)")
    value = default_of(cls, name) if default is _OWN else default
    if default is _OWN and flag.startswith("--no-") and isinstance(value, bool):
        value = not value
    if argument:
        info = typer.Argument(value, help=text, **kwargs)
    else:
        info = typer.Option(value, flag, *aliases, envvar=envvar(flag), help=text, **kwargs)
    info.declared_by = (cls, name)
    return info


# the model's own options (core.modelspec.ModelSpec declares them); one instance serves every
# command that loads a model (Typer reads, never changes, an OptionInfo)
MODEL = from_options(ModelSpec, "name_or_path", "-m")
DEVICE = from_options(ModelSpec, "device")
DTYPE = from_options(ModelSpec, "dtype")
ALLOW_DOWNLOAD = from_options(ModelSpec, "allow_download")
ALLOW_LAX = from_options(Thresholds, "allow_lax")


def model_spec(model: str, device: str, dtype: str, allow_download: bool) -> Any:
    return ModelSpec(name_or_path=model, device=device, dtype=dtype, allow_download=allow_download)


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


RayOpt = Annotated[
    str | None,
    option(
        "--ray",
        help="Run on Ray: local (a Ray instance here), auto (this machine's cluster) or a head "
        "address; same output as without (docs/scale.md).",
    ),
]
