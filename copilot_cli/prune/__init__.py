"""prune: entropy- and attention-aware context compression that keeps meaning and syntax."""

from copilot_cli.prune.pruner import METHODS, PruneOptions, PruneResult, prune

__all__ = ["METHODS", "PruneOptions", "PruneResult", "prune"]
