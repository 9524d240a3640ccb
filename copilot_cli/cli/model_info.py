"""`copilot-opt model-info`: load a model the way every command does and describe it."""

from __future__ import annotations

from copilot_cli.cli.common import JsonOpt, key_value_table, print_json, stdout_console
from copilot_cli.cli.errors import handle_errors
from copilot_cli.cli.params import ALLOW_DOWNLOAD, DEVICE, DTYPE, MODEL, model_spec
from copilot_cli.core import lazy, progress

described = lazy.module("copilot_cli.core.model_info")
models = lazy.module("copilot_cli.core.models")


@handle_errors
def model_info(
    model: str = MODEL,
    device: str = DEVICE,
    dtype: str = DTYPE,
    allow_download: bool = ALLOW_DOWNLOAD,
    json_output: JsonOpt = False,
) -> None:
    """Load a model and its tokenizer, check them, and print what they are (with fingerprints)."""
    spec = model_spec(model, device, dtype, allow_download)
    with progress.progress(f"loading {spec.name_or_path}"):
        info = described.describe_model(models.load_model(spec))
    if json_output:
        print_json(info.to_dict())
        return
    rows = [(key, value) for key, value in info.to_dict().items() if key != "special_tokens"]
    rows.append(("special_tokens", ", ".join(f"{k}={v}" for k, v in info.special_tokens.items())))
    stdout_console.print(key_value_table("model", rows))
