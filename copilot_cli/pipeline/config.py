"""copilot-opt.yaml: one config for the whole pipeline, typed and checked before any step runs.

Each section is the config-file form of one capability's options class (compile_templates ->
CompileOptions, prefill_kv -> PrefillOptions, chunk -> ChunkOptions, quantize ->
QuantizeOptions, prune -> PruneOptions, regress -> RegressOptions): its keys, types and
defaults are derived from that class, so they cannot drift from the library or the CLI. The
pipeline's own defaults, where it differs from a capability's, are `PIPELINE_DEFAULTS`. Paths
are relative to the config file. Every key and default is listed in docs/build.md (a test
checks the list against the classes).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from copilot_cli.chunking.options import ChunkOptions
from copilot_cli.context.options import OverviewOptions
from copilot_cli.core.cluster import require_target
from copilot_cli.core.config_file import load_config
from copilot_cli.core.errors import InputError
from copilot_cli.core.inputs import repository_folder_problem
from copilot_cli.core.modelspec import DEFAULT_DEVICE, ModelSpec
from copilot_cli.core.options import OptionError, from_mapping, schema_of
from copilot_cli.kv.options import PrefillOptions
from copilot_cli.prompts.options import CompileOptions
from copilot_cli.prune.options import PruneOptions
from copilot_cli.quant.options import QuantizeOptions
from copilot_cli.regress.options import RegressOptions, ReportPaths

SECTIONS: dict[str, type] = {
    "compile_templates": CompileOptions,
    "prefill_kv": PrefillOptions,
    "chunk": ChunkOptions,
    "context": OverviewOptions,
    "quantize": QuantizeOptions,
    "prune": PruneOptions,
    "regress": RegressOptions,
}
SWITCHED = ("prefill_kv", "chunk", "context", "quantize", "regress")  # sections with `enabled`
TOP_LEVEL: dict[str, Any] = {
    "model": None,  # None = the default model (the shipped tiny code model)
    "device": DEFAULT_DEVICE,
    "templates": "templates",
    "repositories": ["sample_data/repo"],
    "executor": {"ray": None},  # ray: null (this machine) | local | auto | ADDRESS (docs/scale.md)
}
# Where the pipeline's defaults differ from the capabilities' own (paths relative to the
# config file; `quantize.corpus` null means the repositories and the templates).
PIPELINE_DEFAULTS: dict[str, dict[str, Any]] = {
    "prefill_kv": {"verify": True},
    "quantize": {"corpus": None, "prompts": None},  # null: the repositories and templates /
    # the regress prompts
    "prune": {"rate": 0.5},
    "context": {"enabled": False, "budget": 512},  # the repository overview: opt-in
    "regress": {
        "prompts": "sample_data/prompts.jsonl",
        "variants": ["q8=quant={quant}", "cached=kv={kv}", "kv-int8=kv-dtype=int8"],
    },
}
_STR = {"type": "string"}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "model": {"type": ["string", "null"]},
        "device": _STR,
        "templates": _STR,
        "repositories": {"type": "array", "items": _STR},
        "executor": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"ray": {"type": ["string", "null"]}},
        },
        **{
            name: schema_of(
                cls,
                {"enabled": {"type": "boolean"}} if name in SWITCHED else None,
            )
            for name, cls in SECTIONS.items()
        },
    },
}
SCHEMA["properties"]["quantize"]["properties"]["corpus"] = {
    "type": ["array", "null"],
    "items": _STR,
}


def shown(value: Any) -> str:
    """A default as docs/build.md shows it (YAML spelling)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    return str(value)


@dataclass(frozen=True)
class BuildConfig:
    """A checked copilot-opt.yaml: every step's options, built for one output folder."""

    path: Path
    model: ModelSpec
    templates: Path
    repositories: tuple[Path, ...]
    compile: CompileOptions
    prefill: PrefillOptions | None  # None: the step is switched off
    chunks: tuple[ChunkOptions, ...]
    overviews: tuple[OverviewOptions, ...]  # one per repository (needs chunk)
    quantize: QuantizeOptions | None
    prune: PruneOptions
    regress: RegressOptions | None
    raw: dict[str, Any] = field(repr=False, default_factory=dict)  # the merged YAML values

    def section(self, name: str) -> dict[str, Any]:
        """A section's values as given plus defaults (what a step's inputs hash covers)."""
        return self.raw.get(name, {})


def _merged(data: dict[str, Any]) -> dict[str, Any]:
    merged = {**copy.deepcopy(TOP_LEVEL), **{k: v for k, v in data.items() if k in TOP_LEVEL}}
    for name in SECTIONS:
        defaults = PIPELINE_DEFAULTS.get(name, {})
        if name == "prefill_kv" and data.get(name, {}).get("engine", "transformers") != (
            "transformers"
        ):
            defaults = {}  # --verify compares with transformers: llama.cpp's slots have no twin
        section = {**defaults, **data.get(name, {})}
        if name == "regress":
            section["thresholds"] = dict(data.get(name, {}).get("thresholds", {}))
        merged[name] = section
    return merged


def load_build_config(path: Path, out: Path) -> BuildConfig:
    """The config at `path`, every step's options built for output folder `out`.

    Raises:
        InputError: a bad config, naming the file, key and (for YAML errors) line.
    """
    raw = _merged(load_config(path, SCHEMA))
    base = path.resolve().parent
    try:
        return _build(raw, base, out, path)
    except OptionError as exc:
        raise InputError(exc.message, where=f"{path}: {exc.option}") from None


def _section(raw: dict[str, Any], name: str) -> dict[str, Any]:
    return {k: v for k, v in raw[name].items() if k != "enabled"}


def _enabled(raw: dict[str, Any], name: str) -> bool:
    return bool(raw[name].get("enabled", True))


def _resolved(base: Path, value: str, key: str, *, folder: bool) -> Path:
    path = (base / value).resolve()
    if not path.exists():
        raise OptionError(key, f"{path} does not exist")
    if folder and not path.is_dir():
        raise OptionError(key, f"{path} is not a folder")
    return path


def _model_name(value: str | None, base: Path) -> str | None:
    """A local model path resolved against the config's folder; a path that does not exist is
    refused here (naming the key), a hub id (`org/name`) is left to the loader."""
    if value is None:
        return None
    local = (base / Path(value).expanduser()).resolve()
    if local.exists():
        return str(local)
    looks_like_path = (
        value.startswith((".", "/", "~")) or value.count("/") != 1 or value.endswith(".gguf")
    )
    if looks_like_path:
        raise OptionError("model", f"{local} does not exist")
    return value


def _repositories(raw: dict[str, Any], base: Path) -> tuple[Path, ...]:
    """The repositories, each an existing folder, none twice, no two with one name (their
    chunks files, chunks/NAME.jsonl, would overwrite each other)."""
    if not raw["repositories"] and _enabled(raw, "chunk"):
        raise OptionError("repositories", "is empty: give a repository or set chunk.enabled false")
    repositories = tuple(
        _resolved(base, repo, f"repositories[{i}]", folder=True)
        for i, repo in enumerate(raw["repositories"])
    )
    for i, repo in enumerate(repositories):
        if problem := repository_folder_problem(repo):
            raise OptionError(f"repositories[{i}]", problem)
        for j in range(i):
            if repositories[j] == repo:
                raise OptionError(f"repositories[{i}]", f"{repo} is also repositories[{j}]")
            if repositories[j].name == repo.name:
                raise OptionError(
                    f"repositories[{i}]",
                    f"{repo} has the name of repositories[{j}] ({repositories[j]}): both "
                    f"would write chunks/{repo.name}.jsonl",
                )
    return repositories


def _build(raw: dict[str, Any], base: Path, out: Path, path: Path) -> BuildConfig:
    model_name = _model_name(raw["model"], base)
    dtype = raw["prefill_kv"].get("dtype", "auto")  # the model every step runs: as saved, or this
    model = ModelSpec(model_name or "", device=raw["device"], dtype=dtype)
    templates = _resolved(base, raw["templates"], "templates", folder=True)
    ray = raw["executor"].get("ray")
    require_target(ray, "executor.ray")
    repositories = _repositories(raw, base)
    compile_options = from_mapping(
        CompileOptions,
        raw["compile_templates"],
        base=base,
        option="compile_templates",
        fixed={"src": templates, "out": out / "templates", "tokenizer": model.name_or_path},
    )
    prefill = None
    if _enabled(raw, "prefill_kv"):
        prefill = from_mapping(
            PrefillOptions,
            _section(raw, "prefill_kv"),
            base=base,
            option="prefill_kv",
            fixed={"out": out / "kv", "bundle": None, "model": model, "ray": ray},
        )
    chunks = _chunks(raw, base, out, model, repositories, ray)
    overviews = ()
    if _enabled(raw, "context") and chunks:
        overviews = tuple(
            from_mapping(
                OverviewOptions,
                _section(raw, "context"),
                base=base,
                option="context",
                fixed={"chunks": c.out, "registry": c.registry, "tokenizer": model.name_or_path},
            )
            for c in chunks
        )
    prune = from_mapping(PruneOptions, raw["prune"], base=base, option="prune")
    quantize = _quantize(raw, base, out, model, templates, repositories)
    regress = _regress(raw, base, out, model, prune, ray)
    return BuildConfig(
        path=path,
        model=model,
        templates=templates,
        repositories=repositories,
        compile=compile_options,
        prefill=prefill,
        chunks=chunks,
        overviews=overviews,
        quantize=quantize,
        prune=prune,
        regress=regress,
        raw=raw,
    )


def _chunks(
    raw: dict[str, Any],
    base: Path,
    out: Path,
    model: ModelSpec,
    repositories: tuple[Path, ...],
    ray: str | None,
) -> tuple[ChunkOptions, ...]:
    if not _enabled(raw, "chunk"):
        return ()
    return tuple(
        from_mapping(
            ChunkOptions,
            _section(raw, "chunk"),
            base=base,
            option="chunk",
            fixed={
                "repos": (repo,),
                "ray": ray,
                "out": out / "chunks" / f"{repo.name}.jsonl",
                "registry": out / "chunks" / f"{repo.name}.registry.json",
                "tokenizer": model.name_or_path,
            },
        )
        for repo in repositories
    )


def _quantize(
    raw: dict[str, Any],
    base: Path,
    out: Path,
    model: ModelSpec,
    templates: Path,
    repositories: tuple[Path, ...],
) -> QuantizeOptions | None:
    if not _enabled(raw, "quantize"):
        return None
    section = _section(raw, "quantize")
    corpus = section.pop("corpus", None)
    corpus_paths = (
        tuple(_resolved(base, c, "quantize.corpus", folder=False) for c in corpus)
        if corpus is not None
        else (*repositories, templates)
    )
    prompts_key = "quantize.prompts" if section.get("prompts") else "regress.prompts"
    prompts_value = section.pop("prompts", None) or raw["regress"]["prompts"]
    prompts = _resolved(base, prompts_value, prompts_key, folder=False)
    return from_mapping(
        QuantizeOptions,
        section,
        base=base,
        option="quantize",
        fixed={"out": out / "quant", "corpus": corpus_paths, "prompts": prompts, "model": model},
    )


def variant_values(out: Path, prune: PruneOptions) -> dict[str, Any]:
    """What `{quant}`, `{kv}`, `{out}`, `{prune}` and `{prune_rate}` in a variant stand for."""
    return {
        "quant": str(out / "quant"),
        "kv": str(out / "kv"),
        "out": str(out),
        "prune": f"rate:{prune.rate},method:{prune.method}",
        "prune_rate": prune.rate,
    }


def _regress(
    raw: dict[str, Any],
    base: Path,
    out: Path,
    model: ModelSpec,
    prune: PruneOptions,
    ray: str | None,
) -> RegressOptions | None:
    if not _enabled(raw, "regress"):
        return None
    section = _section(raw, "regress")
    values = variant_values(out, prune)
    section["variants"] = [v.format(**values) for v in section.get("variants", [])]
    _resolved(base, section["prompts"], "regress.prompts", folder=False)
    return from_mapping(
        RegressOptions,
        section,
        base=base,
        option="regress",
        fixed={"reports": ReportPaths.in_folder(out / "reports"), "model": model, "ray": ray},
    )
