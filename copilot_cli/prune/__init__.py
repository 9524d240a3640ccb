"""prune: entropy- and attention-aware context compression that keeps meaning and syntax."""

from copilot_cli.prune.options import METHODS, PruneOptions, language_for_path
from copilot_cli.prune.pruner import PruneResult, prune_text

__all__ = ["METHODS", "PruneOptions", "PruneResult", "language_for_path", "prune_text"]
