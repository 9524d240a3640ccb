"""warm-plan: predict what a server will need next and pre-load it within a memory budget.

Names are imported on first use (core/lazy.py)."""

from copilot_cli.core.lazy import exports

_WHERE = {
    "BloomFilter": "copilot_cli.warm.bloom",
    "Plan": "copilot_cli.warm.plan",
    "PlanItem": "copilot_cli.warm.plan",
    "Request": "copilot_cli.warm.log",
    "RequestLog": "copilot_cli.warm.log",
    "SessionConfig": "copilot_cli.warm.sessions",
    "Sizes": "copilot_cli.warm.predict",
    "WarmPlanOptions": "copilot_cli.warm.options",
    "generate_sessions": "copilot_cli.warm.sessions",
    "inspect_plan": "copilot_cli.warm.inspect",
    "make_plan": "copilot_cli.warm.plan",
    "offline_optimum": "copilot_cli.warm.predict",
    "read_log": "copilot_cli.warm.log",
    "read_plan": "copilot_cli.warm.plan",
}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = exports(__name__, _WHERE)
