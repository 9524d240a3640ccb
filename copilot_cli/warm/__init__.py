"""warm-plan: predict what a server will need next and pre-load it within a memory budget."""

from copilot_cli.warm.bloom import BloomFilter
from copilot_cli.warm.inspect import inspect_plan
from copilot_cli.warm.log import Request, RequestLog, read_log
from copilot_cli.warm.options import WarmPlanOptions
from copilot_cli.warm.plan import Plan, PlanItem, make_plan, read_plan
from copilot_cli.warm.predict import Sizes, offline_optimum
from copilot_cli.warm.sessions import SessionConfig, generate_sessions

__all__ = [
    "BloomFilter",
    "Plan",
    "PlanItem",
    "Request",
    "RequestLog",
    "SessionConfig",
    "Sizes",
    "WarmPlanOptions",
    "generate_sessions",
    "inspect_plan",
    "make_plan",
    "offline_optimum",
    "read_log",
    "read_plan",
]
