"""prune: entropy- and attention-aware context compression that keeps meaning and syntax.

Names are imported on first use (core/lazy.py)."""

from copilot_cli.core.lazy import exports

_WHERE = {
    "METHODS": "copilot_cli.prune.options",
    "PruneOptions": "copilot_cli.prune.options",
    "PruneResult": "copilot_cli.prune.pruner",
    "language_for_path": "copilot_cli.prune.options",
    "prune_text": "copilot_cli.prune.pruner",
}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = exports(__name__, _WHERE)
