"""`copilot-opt serve`: vLLM's OpenAI-compatible server with the prefix connector, one command.

The KV folder is checked against the model here first (fingerprints, geometry), so a mismatch
is one error line in a second, not after the engine's start-up; the engine then checks again
at start. The server runs in the foreground; Ctrl-C / SIGTERM stop it cleanly.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import signal
import subprocess
import sys
from typing import Any

from copilot_cli.core import lazy
from copilot_cli.core.errors import InputError
from copilot_cli.core.models import context_length, load_tokenizer
from copilot_cli.core.modelspec import default_model
from copilot_cli.kv import KVCacheDir
from copilot_cli.serving.compat import EngineModel, check_servable, local_folder
from copilot_cli.serving.options import ServeOptions

transformers = lazy.module("transformers")

CONNECTOR = "CopilotPrefixConnector"
CONNECTOR_MODULE = "copilot_cli.serving.vllm"


def transfer_config(options: ServeOptions) -> dict[str, Any]:
    """The KVTransferConfig that plugs the connector into vLLM (the fixed interface)."""
    return {
        "kv_connector": CONNECTOR,
        "kv_connector_module_path": CONNECTOR_MODULE,
        "kv_role": "kv_consumer",
        "kv_connector_extra_config": {
            "kv_dir": str(options.kv_dir.resolve()),
            "max_bytes": options.max_bytes,
            "preload": options.preload,
            **({"plan": str(options.plan.resolve())} if options.plan else {}),
        },
    }


def check(options: ServeOptions) -> tuple[str, str]:
    """(model folder, KV dtype) after checking the folder against the model.

    Raises:
        FingerprintMismatch / ArtifactError: the folder was made for something else.
    """

    kv = KVCacheDir(options.kv_dir)
    folder = local_folder(options.model or default_model())
    config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
    context_length(config)
    heads = config.num_attention_heads
    engine = EngineModel(
        model_dir=folder,
        tokenizer=load_tokenizer(str(folder)),
        dtype=kv.index.dtype,
        num_layers=config.num_hidden_layers,
        kv_heads=getattr(config, "num_key_value_heads", None) or heads,
        head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
    )
    check_servable(kv, engine)
    return str(folder), kv.index.dtype


def command(options: ServeOptions, model_dir: str, dtype: str) -> list[str]:
    """The vLLM server command (vLLM's own module entry: it also works with vllm-cpu, whose
    `vllm` script looks for a package named `vllm`)."""
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model_dir,
        "--dtype",
        dtype,
        "--host",
        options.host,
        "--port",
        str(options.port),
        "--kv-transfer-config",
        json.dumps(transfer_config(options), sort_keys=True),
        *options.extra_args,
    ]


def printable(options: ServeOptions, model_dir: str, dtype: str) -> str:
    """The same as a `vllm serve` line, for the `vllm` package (GPU) or a launcher of one's own."""

    config = json.dumps(transfer_config(options), sort_keys=True)
    parts = ["vllm", "serve", model_dir, "--dtype", dtype, "--host", options.host]
    parts += ["--port", str(options.port), "--kv-transfer-config", config, *options.extra_args]
    return " ".join(shlex.quote(p) for p in parts)


def serve(options: ServeOptions) -> int:
    """Check, then run the server in the foreground; its exit code (0 on a clean stop)."""
    if importlib.util.find_spec("vllm") is None:
        raise InputError(
            "vLLM is not installed in this environment: run `make vllm-env` and use "
            ".venv-vllm/bin/copilot-opt serve (or pip install -e '.[vllm]')",
            where="serve",
        )
    model_dir, dtype = check(options)
    env = {**os.environ}
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    child = subprocess.Popen(command(options, model_dir, dtype), env=env)

    def forward(signum: int, _frame: Any) -> None:
        child.send_signal(signal.SIGINT)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0 if code in (0, -signal.SIGINT, -signal.SIGTERM) else code
