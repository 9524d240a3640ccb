"""regress: logit-level comparison of optimized variants with the original model, the CI gate."""

from copilot_cli.regress.gate import Thresholds
from copilot_cli.regress.runner import RegressOptions, RegressResult, run_regress
from copilot_cli.regress.variants import KINDS, VariantSpec, parse_variant

__all__ = [
    "KINDS",
    "RegressOptions",
    "RegressResult",
    "Thresholds",
    "VariantSpec",
    "parse_variant",
    "run_regress",
]
