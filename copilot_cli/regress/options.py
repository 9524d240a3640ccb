"""Settings of regress: thresholds, reports, and the merge of regress.yaml, flags and defaults."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from copilot_cli.core import lazy
from copilot_cli.core.cluster import require_target
from copilot_cli.core.engines import engines_for
from copilot_cli.core.errors import InputError
from copilot_cli.core.modelspec import ModelSpec
from copilot_cli.core.options import (
    OptionError,
    coerce_paths,
    require,
    require_count,
    require_number,
    schema_of,
    setting,
    values_from_mapping,
)
from copilot_cli.core.outputs import check_output_shape
from copilot_cli.paths import DEFAULT_PROMPTS
from copilot_cli.regress.variants import ENGINE_KINDS, parse_variant

config_file = lazy.module("copilot_cli.core.config_file")

MAX_GEN_TOKENS = 4096
DEFAULT_BATCH_SIZE = 4  # measured: benchmarks/bench_regress.py runs batch sizes side by side
MAX_BATCH_SIZE = 256  # the model's context bounds it further at run time
ENGINES = engines_for("regress")
ORIGINALS = ("engine", "transformers")

# Beyond these a threshold passes nearly anything (a mean KL of 1 nat is a different model;
# half the top-1 tokens changed is a different model): such a gate needs allow_lax, and every
# report names the lax thresholds.
LAX_KL = 1.0
LAX_SAME_TOP1 = 0.5


@dataclass(frozen=True)
class Thresholds:
    """Pass conditions of a variant. Each is a finite number in its range (NaN would compare
    false with everything and so pass any variant).

    Attributes:
        max_mean_kl: the one-sided 95% upper bound of the mean KL must not exceed this (> 0).
        min_same_top1: the one-sided 95% lower bound of the same-top-1 share must reach this.
        max_prompt_kl: no single prompt's mean KL may exceed this (> 0).
        min_exact_match: share of greedy continuations equal to the base's (None: report only).
        min_bleu: mean BLEU-4 of greedy continuations (None: report only).
        allow_lax: accept thresholds past the sane range (a KL above 1 nat, a same-top-1
            below 0.5); without it they are refused, with it every report names them.
    """

    max_mean_kl: float = setting(
        1e-3, help="The 95% upper bound of the mean KL may not exceed this (default 1e-3)."
    )
    min_same_top1: float = setting(
        0.99, help="The 95% lower bound of the same-top-1 share must reach this (default 0.99)."
    )
    max_prompt_kl: float = setting(
        1e-2, help="No single prompt's mean KL may exceed this (default 1e-2)."
    )
    min_exact_match: float | None = None
    min_bleu: float | None = None
    allow_lax: bool = setting(
        False,
        help="Accept a KL threshold above 1 nat or a same-top-1 below 0.5 (named in every report).",
        flag="--allow-lax-thresholds",
    )

    def __post_init__(self) -> None:
        require_number(self.max_mean_kl, "max_mean_kl", low=0.0, low_open=True)
        require_number(self.min_same_top1, "min_same_top1", low=0.0, high=1.0)
        require_number(self.max_prompt_kl, "max_prompt_kl", low=0.0, low_open=True)
        for name in ("min_exact_match", "min_bleu"):
            if getattr(self, name) is not None:
                require_number(getattr(self, name), name, low=0.0, high=1.0)
        require(isinstance(self.allow_lax, bool), "allow_lax", "must be true or false")
        if not self.allow_lax:
            for name, text in self.lax().items():
                raise OptionError(
                    name,
                    f"{text}: the gate would pass nearly anything "
                    "(give --allow-lax-thresholds, thresholds.allow_lax in a YAML file, "
                    "to mean it)",
                )

    def lax(self) -> dict[str, str]:
        """The thresholds past the sane range, each with why (empty: none)."""
        found = {}
        for name in ("max_mean_kl", "max_prompt_kl"):
            if getattr(self, name) > LAX_KL:
                found[name] = f"{getattr(self, name):g} is above {LAX_KL:g} nat"
        if self.min_same_top1 < LAX_SAME_TOP1:
            found["min_same_top1"] = f"{self.min_same_top1:g} is below {LAX_SAME_TOP1:g}"
        return found

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ReportPaths:
    """Where regress writes its reports (None: not written; json "-" is stdout, the CLI's)."""

    json: Path | None = setting(None, help="Write the JSON report here (- for stdout).")
    junit: Path | None = setting(None, help="Write JUnit XML here.")
    markdown: Path | None = setting(None, help="Write Markdown here.")
    html: Path | None = setting(None, help="Write the HTML report here.")

    def __post_init__(self) -> None:
        coerce_paths(self)
        for name in ("json", "junit", "markdown", "html"):
            check_output_shape(getattr(self, name), name, folder=False)

    @classmethod
    def in_folder(cls, folder: Path) -> ReportPaths:
        """All four, as regress.json/.xml/.md/.html in `folder` (what build writes)."""
        return cls(
            json=folder / "regress.json",
            junit=folder / "regress.xml",
            markdown=folder / "regress.md",
            html=folder / "regress.html",
        )


@dataclass(frozen=True)
class RegressOptions:
    """Settings of regress (see docs/regress.md).

    Attributes:
        prompts: the prompts JSONL.
        variants: `NAME=KIND=ARG[+KIND=ARG]` specs (kinds: quant, kv, kv-dtype,
            prune; with engine vllm: vllm, kv).
        thresholds: the gate.
        gen_tokens: greedy tokens per continuation (0: no generation check).
        max_tokens: a prompt's own tokens (bounded by the model's context at run time).
        baseline, save_baseline: reuse / store the base model's log-probs.
        baseline_topk: store top-k log-probs (0 = the full vocabulary).
        baseline_check: cases of each case set recomputed with the loaded model, chosen at
            random, when a baseline is reused: one that does not match is refused (a baseline
            edited and resealed, or made with something else). 0 turns the check off.
        null_control: also run base vs base (the noise floor).
        batch_size: cases per batched forward (sorted by length so little is padding; fewer
            where a batch's logits would pass 2^27 values). Numbers agree with batch size 1
            to float rounding; the same batch size gives the same bytes.
        reports: which reports to write where.
        model: the model to load when none is handed in.
        ray: None (this process) or a Ray target (`local`, `auto`, an address): cases are
            sharded over actors each holding a model replica; every number is the same.
        engine: what computes the variants: `transformers` (this process), `vllm` (the
            served stack: vLLM with its options and our connector, needs vLLM installed) or
            `llama.cpp` (GGUF files and slot folders, needs llama-cpp-python).
        original: what computes the original: None (the engine's default: transformers,
            except llama.cpp, which computes it from the --model GGUF), `engine` or
            `transformers`.
    """

    prompts: Path = setting(DEFAULT_PROMPTS, help="Prompts JSONL.")
    variants: tuple[str, ...] = setting(
        (),
        help=(
            "NAME=KIND=ARG[+KIND=ARG] (quant, kv, kv-dtype, prune; --engine vllm: vllm, "
            "kv; --engine llama.cpp: llamacpp, kv)."
        ),
        flag="--variant",
    )
    thresholds: Thresholds = setting(default_factory=Thresholds)
    gen_tokens: int = setting(16, help="Greedy tokens per continuation (default 16).")
    max_tokens: int = setting(256, help="Tokens per prompt (default 256).")
    baseline: Path | None = setting(None, yaml=False, help="Reuse stored log-probs.")
    save_baseline: Path | None = setting(
        None, yaml=False, help="Store the base model's log-probs here."
    )
    baseline_topk: int = setting(0, help="Store top-k log-probs (0: all).")
    baseline_check: int = setting(
        2, help="Cases recomputed to check a reused baseline (default 2; 0 = off)."
    )
    null_control: bool = setting(False, help="Also run base vs base (the noise floor).")
    batch_size: int = setting(DEFAULT_BATCH_SIZE, help="Cases per batched forward (default 4).")
    reports: ReportPaths = setting(default_factory=ReportPaths, yaml=False)
    model: ModelSpec = setting(default_factory=ModelSpec, yaml=False)
    ray: str | None = setting(None, yaml=False)
    engine: str = setting("transformers", help="transformers|vllm|llama.cpp")
    original: str | None = setting(None, help="engine or transformers.")

    def __post_init__(self) -> None:
        coerce_paths(self)
        require(self.engine in ENGINES, "engine", f"use one of {', '.join(ENGINES)}")
        require(
            self.engine == "transformers" or self.ray is None,
            "ray",
            f"--engine {self.engine} runs in this process (the engine schedules its own work)",
        )
        require(
            self.original in (None, *ORIGINALS), "original", f"use one of {', '.join(ORIGINALS)}"
        )
        require(
            self.original != "engine" or self.engine == "llama.cpp",
            "original",
            f"--engine {self.engine} computes the original in transformers",
        )
        require_target(self.ray)
        require(
            bool(self.variants) or self.null_control or self.save_baseline is not None,
            "variants",
            "give at least one variant (or the null control)",
        )
        require(
            self.baseline is None or self.save_baseline is None,
            "baseline",
            "reusing a baseline and saving one exclude each other",
        )
        require_count(self.gen_tokens, "gen_tokens", high=MAX_GEN_TOKENS)
        for name in ("min_exact_match", "min_bleu"):  # a configured check that cannot run
            require(
                self.gen_tokens > 0 or getattr(self.thresholds, name) is None,
                "gen_tokens",
                f"0 turns off the greedy continuations that thresholds.{name} checks: "
                "give a count above 0 or drop the threshold",
            )
        require_count(self.max_tokens, "max_tokens", low=4)
        require_count(self.batch_size, "batch_size", low=1, high=MAX_BATCH_SIZE)
        require_count(self.baseline_topk, "baseline_topk")
        require_count(self.baseline_check, "baseline_check", high=1 << 20)
        check_output_shape(self.save_baseline, "save_baseline", folder=False)
        require(
            self.prompts.is_file(),
            "prompts",
            f"{self.prompts} "
            + ("is not a regular file" if self.prompts.exists() else "does not exist"),
        )
        names = [spec.name for spec in self.parsed(check_paths=False)]
        require(len(set(names)) == len(names), "variants", "two variants have the same name")

    @property
    def specs(self) -> tuple[Any, ...]:
        """The variants parsed (VariantSpec), each artifact path checked (at run time: in a
        build, the artifacts are made by the steps before)."""
        return self.parsed(check_paths=True)

    def parsed(self, *, check_paths: bool) -> tuple[Any, ...]:

        try:
            return tuple(
                parse_variant(v, ENGINE_KINDS[self.engine], check_paths=check_paths)
                for v in self.variants
            )
        except OptionError:
            raise
        except InputError as exc:
            raise OptionError("variants", f"{exc.where}: {exc.message}") from None


CONFIG_SCHEMA = schema_of(RegressOptions)


def regress_options(
    config: Path | None = None, overrides: dict[str, Any] | None = None
) -> RegressOptions:
    """Options from defaults, then regress.yaml (paths in it relative to its folder), then
    `overrides` (flags; None values are not given; `thresholds` may be a partial mapping).

    Raises:
        OptionError: a refused value that came from `overrides` or a default (the CLI names
            the flag).
        InputError: a refused value that came from the file, naming the file and key.
    """

    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    given_limits = {k: v for k, v in given.pop("thresholds", {}).items() if v is not None}
    from_file: dict[str, Any] = {}
    if config is not None:
        data = dict(config_file.load_config(config, CONFIG_SCHEMA))
        file_limits = values_from_mapping(Thresholds, data.pop("thresholds", {}))
        from_file = values_from_mapping(RegressOptions, data, base=config.resolve().parent)
        from_file["thresholds"] = file_limits
    limits = {**from_file.pop("thresholds", {}), **given_limits}
    try:
        return RegressOptions(**{**from_file, **given}, thresholds=Thresholds(**limits))
    except OptionError as exc:
        in_file = exc.option not in given and (
            exc.option in from_file or (exc.option in limits and exc.option not in given_limits)
        )
        if not in_file or config is None:
            raise
        key = exc.option if exc.option in from_file else f"thresholds.{exc.option}"
        raise InputError(exc.message, where=f"{config}: {key}") from None
