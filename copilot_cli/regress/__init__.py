"""regress: logit-level comparison of optimized variants with the original model, the CI gate.

Names are imported on first use (core/lazy.py)."""

from copilot_cli.core.lazy import exports

_WHERE = {
    "KINDS": "copilot_cli.regress.variants",
    "RegressOptions": "copilot_cli.regress.options",
    "RegressResult": "copilot_cli.regress.results",
    "ReportPaths": "copilot_cli.regress.options",
    "Thresholds": "copilot_cli.regress.options",
    "VariantResult": "copilot_cli.regress.results",
    "VariantSpec": "copilot_cli.regress.variants",
    "inspect_baseline": "copilot_cli.regress.baseline",
    "parse_variant": "copilot_cli.regress.variants",
    "regress_options": "copilot_cli.regress.options",
    "run_regress": "copilot_cli.regress.runner",
}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = exports(__name__, _WHERE)
