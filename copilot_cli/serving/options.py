"""Settings of serve (no torch import: the CLI builds these)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from copilot_cli.core.engines import refuse_ignored
from copilot_cli.core.options import coerce_paths, require, require_count, setting
from copilot_cli.kv.options import DEFAULT_MAX_BYTES


@dataclass(frozen=True)
class ServeOptions:
    """Settings of serve.

    Attributes:
        kv_dir: a prefill-kv folder.
        model: the served model folder (default: the default model).
        host, port: where the OpenAI-compatible server listens.
        max_bytes: host memory for loaded segments.
        preload: read and verify the whole folder into memory at engine start.
        plan: a warm plan (`warm-plan`): L0 at start, L1 in the background, the rest only
            when its Bloom filter allows (replaces `preload`).
        extra_args: passed to vLLM as they are (after `--` on the command line).
        engine: "vllm" (its OpenAI server with the prefix connector) or "llama.cpp" (a slot
            folder restored by llama.cpp; `model` names the GGUF; the loading settings above
            are vLLM's and refused with it).
    """

    kv_dir: Path = setting(Path("build/kv"), yaml=False)
    model: str = ""
    host: str = "127.0.0.1"
    port: int = 8000
    max_bytes: int = DEFAULT_MAX_BYTES
    preload: bool = True
    plan: Path | None = None
    extra_args: tuple[str, ...] = ()
    engine: str = "vllm"

    def __post_init__(self) -> None:
        coerce_paths(self)
        refuse_ignored(self.engine, "serve", self)
        require(self.kv_dir.is_dir(), "kv_dir", f"{self.kv_dir} is not a KV folder")
        require_count(self.port, "port", low=1, high=65535)
        require_count(self.max_bytes, "max_bytes", low=1)
        require(self.plan is None or self.plan.is_file(), "plan", f"{self.plan} is not a file")
