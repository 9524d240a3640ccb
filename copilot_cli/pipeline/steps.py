"""The pipeline's steps: what each reads (hashed), what it writes, and which library call it is.

A step only maps the config to its capability's one entry point and condenses the typed
result into the summary the manifest keeps. Whether a step stops the build (`failures`) or
gives the verdict (`verdict`, the regress gate) is said by its outcome, not by its name.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field, replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from copilot_cli import __version__, kv, quant, regress
from copilot_cli.chunking import chunk_repository, walk_all
from copilot_cli.core.artifacts import FINGERPRINT_SCHEME
from copilot_cli.core.fingerprints import model_fingerprint_from_folder, tokenizer_fingerprint
from copilot_cli.core.models import load_model, load_tokenizer
from copilot_cli.core.options import to_jsonable
from copilot_cli.pipeline.config import BuildConfig
from copilot_cli.pipeline.manifest import digest, file_sha, tree_hashes
from copilot_cli.pipeline.overview import overview_prefixes
from copilot_cli.prompts import compile_templates


@dataclass
class StepOutcome:
    summary: dict[str, Any]
    failures: list[str] = field(default_factory=list)  # a check failed: the build stops
    verdict: str | None = None  # "pass" | "fail" from a gate step


class Context:
    """Lazily loaded model and tokenizer: a build whose steps are all skipped loads neither."""

    def __init__(
        self, config: BuildConfig, out: Path, known_models: dict[str, str] | None = None
    ) -> None:
        self.config = config
        self.out = out
        self._loaded: Any = None
        self._tokenizer: Any = None
        self._model_files: str | None = None
        # the identity last computed for the model folder's exact files (build-manifest.json
        # `models`): an unchanged folder is not loaded again to fingerprint it
        known = known_models if isinstance(known_models, dict) else {}
        self.known_models = {k: v for k, v in known.items() if isinstance(v, str)}
        self.models: dict[str, str] = {}

    def model_identity(self) -> str:
        """The model's and tokenizer's fingerprints (what they compute: re-saving or re-sharding
        the model rebuilds nothing), computed once per build; every step reads it. Reused
        without importing transformers when every file of the folder (by sha256), the
        fingerprint scheme and the transformers version are those it was computed from."""
        if self._model_files is None:
            folder = Path(self.config.model.name_or_path)
            if folder.is_dir():
                files = _folder_key(folder)
                identity = self.known_models.get(files) or self._fingerprint(folder)
                self.models = {files: identity}
                self._model_files = identity
            else:
                self._model_files = digest(str(folder))
        return self._model_files

    def _fingerprint(self, folder: Path) -> str:

        return digest(
            [model_fingerprint_from_folder(folder), tokenizer_fingerprint(self.tokenizer())]
        )

    def loaded(self) -> Any:
        if self._loaded is None:
            self._loaded = load_model(self.config.model)
        return self._loaded

    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            if self._loaded is not None:
                self._tokenizer = self._loaded.tokenizer
            else:
                self._tokenizer = load_tokenizer(self.config.model.name_or_path)
        return self._tokenizer

    def base_inputs(self, options: Any) -> dict[str, Any]:
        """What every step's inputs hold: the tool, the model files and the step's options."""
        # where the work runs (processes, a Ray cluster) does not change what it makes
        settings = {
            k: v for k, v in to_jsonable(options).items() if k not in ("model", "ray", "jobs")
        }
        return {"tool": __version__, "model": self.model_identity(), "options": digest(settings)}


def _folder_key(folder: Path) -> str:

    try:
        transformers = version("transformers")
    except PackageNotFoundError:
        transformers = None
    return digest([FINGERPRINT_SCHEME, transformers, tree_hashes(folder)])


class Step(abc.ABC):
    """A node of the pipeline graph."""

    name: str
    needs: tuple[str, ...] = ()
    outputs: tuple[Path, ...] = ()

    @abc.abstractmethod
    def inputs(self, ctx: Context) -> dict[str, Any]:
        """What the step reads, hashed: it reruns when any value changes."""

    @abc.abstractmethod
    def run(self, ctx: Context) -> StepOutcome:
        """Run the step's capability; the summary is what the manifest keeps."""


class CompileStep(Step):
    name = "compile-templates"

    def __init__(self, config: BuildConfig) -> None:
        self.options = config.compile
        self.outputs = (config.compile.out,)

    def inputs(self, ctx: Context) -> dict[str, Any]:
        return {
            **ctx.base_inputs(self.options),
            "templates": digest(tree_hashes(self.options.src)),
        }

    def run(self, ctx: Context) -> StepOutcome:

        result = compile_templates(self.options, ctx.tokenizer())
        return StepOutcome(
            {
                "templates": len(result.templates),
                "recompiled": sum(t.status == "compiled" for t in result.templates),
                "warnings": result.warnings,
            }
        )


class PrefillStep(Step):
    name = "prefill-kv"
    needs = ("compile-templates",)

    def __init__(self, config: BuildConfig) -> None:
        assert config.prefill is not None
        self.bundle = config.compile.out
        self.options = config.prefill
        self.outputs = (config.prefill.out,)

    def inputs(self, ctx: Context) -> dict[str, Any]:
        bundle = digest(tree_hashes(self.bundle)) if self.bundle.exists() else None
        return {**ctx.base_inputs(self.options), "bundle": bundle}

    def run(self, ctx: Context) -> StepOutcome:
        options = replace(self.options, bundle=self.bundle)
        if options.engine == "llama.cpp":  # llama.cpp's own slot files, for its server
            index = kv.prefill_llamacpp(options)
            tokens = sum(len(p.token_ids) for p in index.prefixes)
            sizes = sum(p.bytes for p in index.prefixes)
            return StepOutcome(
                {"prefixes": len(index.prefixes), "prefix_tokens": tokens, "bytes": sizes}
            )
        result = kv.prefill_kv(options, ctx.loaded())
        summary = {
            "prefixes": len(result.prefixes),
            "prefix_tokens": result.sum_prefix_tokens,
            "distinct_tokens": result.distinct_tokens,
            "computed_tokens": result.computed_tokens,
            "bytes": result.bytes_on_disk,
        }
        if result.verify:
            summary["verify_max_abs_diff"] = max(r.max_abs_diff for r in result.verify)
        failures = (
            [f"prefill-kv --verify failed for {', '.join(result.failures)}"]
            if result.failures
            else []
        )
        return StepOutcome(summary, failures)


class ChunkStep(Step):
    def __init__(self, options: Any) -> None:
        self.options = options
        self.name = f"chunk:{options.repos[0].name}"
        self.outputs = (options.out, options.registry)

    def inputs(self, ctx: Context) -> dict[str, Any]:

        files = walk_all(self.options).files
        return {
            **ctx.base_inputs(self.options),
            "files": digest([(rel, file_sha(p)) for p, rel in files]),
        }

    def run(self, ctx: Context) -> StepOutcome:

        s = chunk_repository(self.options, ctx.tokenizer()).summary
        return StepOutcome(
            {
                "files": s.files,
                "chunks_written": s.chunks_written,
                "chunks_total": s.chunks_total,
                "exact_duplicates_folded": s.exact_duplicates_folded,
                "near_duplicates_marked": s.near_duplicates_marked,
                "skipped": s.skipped,
            }
        )


class ContextStep(Step):
    """The repository overview, each overview-taking template's static text + the overview
    (one static prefix per template and repository), and, with prefill-kv on, their KV."""

    def __init__(self, config: BuildConfig, options: Any) -> None:
        self.options = options
        self.bundle = config.compile.out
        self.prefill = config.prefill
        repo = options.chunks.stem
        self.name = f"context:{repo}"
        self.needs = ("compile-templates", f"chunk:{repo}")
        self.folder = options.chunks.parent.parent / "context" / repo
        self.outputs = (self.folder,)

    def inputs(self, ctx: Context) -> dict[str, Any]:
        files = [self.options.chunks, self.options.registry]
        return {
            **ctx.base_inputs(self.options),
            "bundle": digest(tree_hashes(self.bundle)) if self.bundle.exists() else None,
            "chunks": [file_sha(p) if p is not None and p.exists() else None for p in files],
            "prefill": digest(to_jsonable(self.prefill)) if self.prefill else None,
        }

    def run(self, ctx: Context) -> StepOutcome:

        result, written = overview_prefixes(self.options, self.bundle, self.folder, ctx.tokenizer())
        summary = {"definitions": len(result.entries), "tokens": result.tokens}
        summary["prefixes"] = sorted(p.stem for p in written)
        if self.prefill is None or not written:
            return StepOutcome(summary)
        options = replace(self.prefill, out=self.folder / "kv", texts=tuple(written))
        stored = kv.prefill_kv(options, ctx.loaded())
        summary["prefix_tokens"] = stored.sum_prefix_tokens
        failures = [f"prefill-kv --verify failed for {', '.join(stored.failures)}"]
        return StepOutcome(summary, failures if stored.failures else [])


class QuantizeStep(Step):
    name = "quantize"

    def __init__(self, config: BuildConfig) -> None:
        assert config.quantize is not None
        self.options = config.quantize
        self.outputs = (config.quantize.out,)

    def inputs(self, ctx: Context) -> dict[str, Any]:
        o = self.options
        return {
            **ctx.base_inputs(o),
            "corpus": digest([tree_hashes(c) for c in o.corpus]),
            "prompts": digest(tree_hashes(o.prompts)) if o.prompts else None,
        }

    def run(self, ctx: Context) -> StepOutcome:
        report = quant.quantize_embeddings(self.options, ctx.loaded()).report
        return StepOutcome(
            {
                "scheme": report.scheme,
                "fp16_bytes": report.memory.fp16_bytes,
                "quantized_bytes": report.memory.quantized_bytes,
                "mean_kl": report.logit_fidelity.mean_kl if report.logit_fidelity else None,
            }
        )


class RegressStep(Step):
    """The gate: its outcome is the build's verdict."""

    name = "regress"

    def __init__(self, config: BuildConfig, upstream: dict[str, Path]) -> None:
        assert config.regress is not None
        self.options = config.regress
        self.upstream = upstream  # step name -> the artifact regress reads from it
        self.needs = tuple(upstream)
        self.outputs = (config.regress.reports.json.parent,)

    def inputs(self, ctx: Context) -> dict[str, Any]:
        return {
            **ctx.base_inputs(self.options),
            "upstream": {
                name: digest(tree_hashes(path)) if path.exists() else None
                for name, path in sorted(self.upstream.items())
            },
            "prompts": digest(tree_hashes(self.options.prompts)),
        }

    def run(self, ctx: Context) -> StepOutcome:
        result = regress.run_regress(self.options, ctx.loaded())
        summary = {
            "passed": result.passed,
            "variants": {
                v.name: {
                    "passed": v.passed,
                    "mean_kl": v.summary.kl_mean,
                    "same_top1": v.summary.same_top1,
                    "failures": v.failures,
                }
                for v in result.variants
            },
        }
        return StepOutcome(summary, verdict="pass" if result.passed else "fail")


def make_steps(config: BuildConfig) -> list[Step]:
    """The steps the config switches on, each after the steps it reads from."""
    steps: list[Step] = [CompileStep(config)]
    upstream: dict[str, Path] = {}
    if config.prefill is not None:
        steps.append(PrefillStep(config))
        upstream["prefill-kv"] = config.prefill.out
    steps.extend(ChunkStep(options) for options in config.chunks)
    steps.extend(ContextStep(config, options) for options in config.overviews)
    if config.quantize is not None:
        steps.append(QuantizeStep(config))
        upstream["quantize"] = config.quantize.out
    if config.regress is not None:
        steps.append(RegressStep(config, upstream))
    return steps
