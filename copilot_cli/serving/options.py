"""Settings of serve (no torch import: the CLI builds these)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from copilot_cli.core.engines import engines_for, refuse_ignored
from copilot_cli.core.options import coerce_paths, require, require_count, setting
from copilot_cli.kv.options import DEFAULT_MAX_BYTES

ENDPOINT_ENGINES = engines_for("endpoint")


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

    kv_dir: Path = setting(Path("build/kv"), yaml=False, help="A folder written by prefill-kv.")
    model: str = ""
    host: str = setting("127.0.0.1", help="Address to listen on.")
    port: int = setting(
        8000, help="Port to listen on (8000, vLLM's own; with --bundle 8012, llama.vscode's)."
    )
    max_bytes: int = setting(DEFAULT_MAX_BYTES, help="Host memory for loaded prefixes (bytes).")
    preload: bool = setting(
        True, help="Load prefixes on first use, not at start.", flag="--no-preload"
    )
    plan: Path | None = setting(None, help="A warm plan: what to load at start and after.")
    extra_args: tuple[str, ...] = ()
    engine: str = setting(
        "vllm",
        help=(
            "vllm, or llama.cpp (a slot folder and --model FILE.gguf); with --bundle also"
            " transformers."
        ),
    )

    def __post_init__(self) -> None:
        coerce_paths(self)
        refuse_ignored(self.engine, "serve", self)
        require(self.kv_dir.is_dir(), "kv_dir", f"{self.kv_dir} is not a KV folder")
        require_count(self.port, "port", low=1, high=65535)
        require_count(self.max_bytes, "max_bytes", low=1)
        require(self.plan is None or self.plan.is_file(), "plan", f"{self.plan} is not a file")


@dataclass(frozen=True)
class EndpointOptions:
    """Settings of the completion endpoint (`serve --bundle`).

    Attributes:
        kv_dir: the prepared KV: a prefill-kv folder (transformers, vLLM) or a slot folder
            of prefill-kv --engine llama.cpp.
        bundle, template: the compiled templates and the one a request is rendered with.
        chunks, registry: the repository's chunks file and registry (loaded once).
        engine: transformers, llama.cpp or vllm.
        model: the model folder, or the GGUF file for llama.cpp.
        budget: tokens of repository context per request (a request may ask for fewer).
        host, port: where it listens (8012: where llama.vscode and llama.vim look first).
        extra_args: arguments for vLLM's server (`serve ... -- ARGS`).
    """

    kv_dir: Path
    bundle: Path = setting(help="Serve the editors' endpoint with this bundle.")
    chunks: Path = setting(help="The repository's chunks.")
    registry: Path | None = setting(None, help="Their registry.")
    template: str = setting("code-completion", help="Its template.")
    engine: str = "transformers"
    model: str = ""
    budget: int = setting(1024, help="Context tokens per request.")
    host: str = "127.0.0.1"
    port: int = 8012
    extra_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        coerce_paths(self)
        require(
            self.engine in ENDPOINT_ENGINES, "engine", f"use one of {', '.join(ENDPOINT_ENGINES)}"
        )
        require(self.kv_dir.is_dir(), "kv_dir", f"{self.kv_dir} is not a folder")
        require(self.bundle.is_dir(), "bundle", f"{self.bundle} is not a bundle folder")
        require(self.chunks.is_file(), "chunks", f"{self.chunks} is not a file")
        require_count(self.budget, "budget", low=1, high=1 << 16)
        require_count(self.port, "port", low=1, high=65535)
