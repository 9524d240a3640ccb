"""The pipeline's steps: what each reads (hashed), what it writes, and how it runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from copilot_cli import __version__
from copilot_cli.build.manifest import digest, tree_hashes
from copilot_cli.core.models import SHIPPED_MODEL


@dataclass
class Step:
    name: str
    needs: list[str]
    outputs: list[Path]
    inputs: Callable[[], dict[str, Any]]
    run: Callable[[], dict[str, Any]]


class Context:
    """Lazily loaded model and tokenizer: a build whose steps are all skipped loads neither."""

    def __init__(self, config: dict[str, Any], out: Path) -> None:
        self.config = config
        self.out = out
        self._loaded = None
        self._tokenizer = None
        self._model_files: str | None = None

    @property
    def model_dir(self) -> str:
        return self.config["model"] or str(SHIPPED_MODEL)

    def model_files(self) -> str:
        """Hash of the model folder's files, computed once per build (every step reads it)."""
        if self._model_files is None:
            folder = Path(self.model_dir)
            self._model_files = digest(tree_hashes(folder) if folder.exists() else self.model_dir)
        return self._model_files

    def loaded(self) -> Any:
        if self._loaded is None:
            from copilot_cli.core.models import ModelSpec, load_model

            dtype = self.config["prefill_kv"]["dtype"]
            self._loaded = load_model(
                ModelSpec(
                    self.model_dir,
                    device=self.config["device"],
                    dtype=dtype if dtype != "float32" else "auto",
                )
            )
        return self._loaded

    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            if self._loaded is not None:
                self._tokenizer = self._loaded.tokenizer
            else:
                from copilot_cli.core.models import load_tokenizer

                self._tokenizer = load_tokenizer(self.model_dir)
        return self._tokenizer


def make_steps(ctx: Context) -> list[Step]:
    config, out = ctx.config, ctx.out
    bundle, kv, quant = out / "templates", out / "kv", out / "quant"
    reports = out / "reports"
    steps: list[Step] = []
    base = {"tool": __version__}

    def compile_inputs() -> dict[str, Any]:
        return {
            **base,
            "templates": digest(tree_hashes(Path(config["templates"]))),
            "model": ctx.model_files(),
            "options": digest(config["compile_templates"]),
        }

    def compile_run() -> dict[str, Any]:
        from copilot_cli.prompts import CompileOptions, compile_templates

        options = CompileOptions(
            Path(config["templates"]), bundle, config["compile_templates"]["min_prefix_tokens"]
        )
        result = compile_templates(options, ctx.tokenizer())
        compiled = sum(t.status == "compiled" for t in result.templates)
        return {
            "templates": len(result.templates),
            "recompiled": compiled,
            "warnings": result.warnings,
        }

    steps.append(Step("compile-templates", [], [bundle], compile_inputs, compile_run))

    if config["prefill_kv"]["enabled"]:

        def kv_inputs() -> dict[str, Any]:
            return {
                **base,
                "bundle": digest(tree_hashes(bundle)) if bundle.exists() else None,
                "model": ctx.model_files(),
                "options": digest(config["prefill_kv"]),
            }

        def kv_run() -> dict[str, Any]:
            from copilot_cli.core.errors import CheckFailed
            from copilot_cli.kv import PrefillOptions, prefill_kv, verify_prefixes
            from copilot_cli.kv.builder import prefixes_from_bundle

            settings = config["prefill_kv"]
            loaded = ctx.loaded()
            sources = prefixes_from_bundle(bundle, loaded.tokenizer_fingerprint)
            result = prefill_kv(
                loaded,
                sources,
                PrefillOptions(
                    out=kv, block_size=settings["block_size"], chunk_size=settings["chunk_size"]
                ),
            )
            summary = {
                "prefixes": len(result.prefixes),
                "prefix_tokens": result.sum_prefix_tokens,
                "distinct_tokens": result.distinct_tokens,
                "computed_tokens": result.computed_tokens,
                "bytes": result.bytes_on_disk,
            }
            if settings["verify"]:
                reports_ = verify_prefixes(loaded, kv)
                summary["verify_max_abs_diff"] = max(r.max_abs_diff for r in reports_)
                failed = [r.name for r in reports_ if not r.passed]
                if failed:
                    raise CheckFailed(f"prefill-kv --verify failed for {', '.join(failed)}")
            return summary

        steps.append(Step("prefill-kv", ["compile-templates"], [kv], kv_inputs, kv_run))

    if config["chunk"]["enabled"]:
        for repo in config["repositories"]:
            name = Path(repo).name
            target = out / "chunks" / f"{name}.jsonl"
            registry = out / "chunks" / f"{name}.registry.json"

            def chunk_inputs(repo: str = repo) -> dict[str, Any]:
                from copilot_cli.chunking.walk import walk

                files = walk(
                    Path(repo),
                    include=tuple(config["chunk"]["include"]),
                    exclude=tuple(config["chunk"]["exclude"]),
                ).files
                from copilot_cli.build.manifest import file_sha

                return {
                    **base,
                    "files": digest([(rel, file_sha(p)) for p, rel in files]),
                    "model": ctx.model_files(),
                    "options": digest(config["chunk"]),
                }

            def chunk_run(
                repo: str = repo, target: Path = target, registry: Path = registry
            ) -> dict[str, Any]:
                from copilot_cli.chunking import ChunkOptions, chunk_repository
                from copilot_cli.core.models import context_length

                settings = config["chunk"]
                from transformers import AutoConfig

                limit = context_length(
                    AutoConfig.from_pretrained(ctx.model_dir, local_files_only=True)
                )
                result = chunk_repository(
                    ChunkOptions(
                        repo=Path(repo),
                        out=target,
                        max_tokens=settings["max_tokens"],
                        reserve=settings["reserve"],
                        include=tuple(settings["include"]),
                        exclude=tuple(settings["exclude"]),
                        registry=registry,
                    ),
                    ctx.tokenizer(),
                    limit,
                )
                s = result.summary
                return {
                    "files": s["files"],
                    "chunks_written": s["chunks_written"],
                    "chunks_total": s["chunks_total"],
                    "exact_duplicates_folded": s["exact_duplicates_folded"],
                    "near_duplicates_marked": s["near_duplicates_marked"],
                    "skipped": s["skipped"],
                }

            steps.append(Step(f"chunk:{name}", [], [target, registry], chunk_inputs, chunk_run))

    if config["quantize"]["enabled"]:
        qsettings = config["quantize"]
        corpus = qsettings["corpus"] or [*config["repositories"], config["templates"]]

        def quant_inputs() -> dict[str, Any]:
            return {
                **base,
                "model": ctx.model_files(),
                "options": digest(qsettings),
                "corpus": digest([tree_hashes(Path(c)) for c in corpus]),
                "prompts": digest(tree_hashes(Path(config["regress"]["prompts"]))),
            }

        def quant_run() -> dict[str, Any]:
            from copilot_cli.quant import QuantizeOptions, quantize_embeddings

            result = quantize_embeddings(
                ctx.loaded(),
                QuantizeOptions(
                    out=quant,
                    bits=qsettings["bits"],
                    group_size=qsettings["group_size"],
                    keep_fp16=qsettings["keep_fp16"],
                    keep_coverage=qsettings["keep_coverage"],
                    corpus=tuple(Path(c) for c in corpus),
                    include_lm_head=qsettings["include_lm_head"],
                    prompts=Path(config["regress"]["prompts"]),
                ),
            )
            memory = result.report["memory"]
            return {
                "scheme": result.report["scheme"],
                "fp16_bytes": memory["fp16_bytes"],
                "quantized_bytes": memory["quantized_bytes"],
                "mean_kl": result.report["logit_fidelity"]["mean_kl"],
            }

        steps.append(Step("quantize", [], [quant], quant_inputs, quant_run))

    if config["regress"]["enabled"]:
        rsettings = config["regress"]
        paths = {"quant": str(quant), "kv": str(kv), "out": str(out)}
        variants = [
            v.format(**paths, prune_rate=config["prune"]["rate"]) for v in rsettings["variants"]
        ]
        needs = [s.name for s in steps if s.name in ("quantize", "prefill-kv")]

        def regress_inputs() -> dict[str, Any]:
            upstream = {
                n: digest(tree_hashes(p)) if p.exists() else None
                for n, p in (("quant", quant), ("kv", kv))
            }
            return {
                **base,
                "model": ctx.model_files(),
                "options": digest(rsettings),
                "variants": variants,
                "upstream": upstream,
                "prompts": digest(tree_hashes(Path(rsettings["prompts"]))),
            }

        def regress_run() -> dict[str, Any]:
            from copilot_cli.core.artifacts import write_bytes
            from copilot_cli.regress import RegressOptions, Thresholds, parse_variant, run_regress
            from copilot_cli.regress.reports import html_report, junit_xml, markdown, to_json

            result = run_regress(
                ctx.loaded(),
                RegressOptions(
                    prompts=Path(rsettings["prompts"]),
                    variants=tuple(parse_variant(v) for v in variants),
                    thresholds=Thresholds(**rsettings["thresholds"]),
                    gen_tokens=rsettings["gen_tokens"],
                    max_tokens=rsettings["max_tokens"],
                ),
            )
            for name, render in (
                ("regress.json", to_json),
                ("regress.xml", junit_xml),
                ("regress.md", markdown),
                ("regress.html", html_report),
            ):
                write_bytes(reports / name, render(result).encode("utf-8"))
            return {
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

        steps.append(Step("regress", needs, [reports], regress_inputs, regress_run))
    return steps
