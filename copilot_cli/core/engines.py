"""The engines copilot-opt prepares for, in one table: which command can run on which engine,
and the settings a command's engine does not honour. A setting an engine would ignore is
refused with one line naming it (never silently dropped); the options classes check this in
`__post_init__`, so the CLI, a build config and the library refuse alike."""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import Any

from copilot_cli.core.options import OptionError


@dataclass(frozen=True)
class Engine:
    """One engine: the commands it runs (prefill-kv: produce KV; serve: vLLM's server or a
    slot server; endpoint: serve --bundle, the editors' endpoint; regress: compute variants),
    and per command the option fields it ignores."""

    name: str
    commands: tuple[str, ...]
    ignores: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)


ENGINES: dict[str, Engine] = {
    "transformers": Engine("transformers", ("prefill-kv", "endpoint", "regress")),
    "vllm": Engine("vllm", ("serve", "endpoint", "regress")),
    "llama.cpp": Engine(
        "llama.cpp",
        ("prefill-kv", "serve", "endpoint", "regress"),
        {
            # llama.cpp computes in its own types, blocks and batches, in this process
            "prefill-kv": ("verify", "ray", "dtype", "block_size", "chunk_size", "device"),
            # its slot server restores from the folder itself, and takes no vLLM arguments
            "serve": ("max_bytes", "preload", "plan", "extra_args"),
        },
    ),
}


# where an option is not its own flag on the command line: the name the refusal goes by
_NAMED = {"extra_args": "arguments after --", "preload": "no_preload"}


def engines_for(command: str) -> tuple[str, ...]:
    """The engines `command` runs on, in the table's order."""
    return tuple(name for name, engine in ENGINES.items() if command in engine.commands)


def require_engine(name: str, command: str) -> Engine:
    """The engine `name` for `command`; OptionError on `engine` otherwise."""
    choices = engines_for(command)
    if name not in choices:
        raise OptionError("engine", f"{name!r}: {command} runs on {', '.join(choices)}")
    return ENGINES[name]


def refuse_ignored(name: str, command: str, options: Any) -> None:
    """Refuse every setting of `options` that differs from its default and that engine `name`
    does not honour for `command` (`device`: the options' model's device)."""
    engine = require_engine(name, command)
    defaults = {f.name: f for f in dataclasses.fields(options)}
    for field in engine.ignores.get(command, ()):
        if field == "device":
            changed = options.model.device != "cpu"
        else:
            spec = defaults[field]
            default = (
                spec.default_factory()  # type: ignore[misc]
                if spec.default is dataclasses.MISSING
                else spec.default
            )
            changed = getattr(options, field) != default
        if changed:
            raise OptionError(
                _NAMED.get(field, field), f"not honoured by --engine {name}: leave it out"
            )


def llama_cpp_module(path: str) -> Any:
    """Module `path`, one that imports llama-cpp-python; OptionError naming --engine when
    llama-cpp-python is not installed here (kv/llamacpp.py computes slots, serving/llamacpp.py
    serves them)."""
    try:
        return importlib.import_module(path)
    except ImportError:
        raise OptionError(
            "engine", "llama-cpp-python is not installed here (make llamacpp-env, then run in "
            ".venv-llamacpp)",
        ) from None  # fmt: skip
