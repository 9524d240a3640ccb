"""regress: logit-level comparison of optimized variants with the original model, the CI gate."""

from copilot_cli.regress.baseline import inspect_baseline
from copilot_cli.regress.options import RegressOptions, ReportPaths, Thresholds, regress_options
from copilot_cli.regress.results import RegressResult, VariantResult
from copilot_cli.regress.runner import run_regress
from copilot_cli.regress.variants import KINDS, VariantSpec, parse_variant

__all__ = [
    "KINDS",
    "RegressOptions",
    "RegressResult",
    "ReportPaths",
    "Thresholds",
    "VariantResult",
    "VariantSpec",
    "inspect_baseline",
    "parse_variant",
    "regress_options",
    "run_regress",
]
