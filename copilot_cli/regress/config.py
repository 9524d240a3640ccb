"""regress.yaml: prompts, variants, thresholds and generation settings (flags override it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from copilot_cli.core.config_file import load_config

NUMBER = {"type": "number"}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "prompts": {"type": "string"},
        "variants": {"type": "array", "items": {"type": "string"}},
        "thresholds": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "max_mean_kl": {"type": "number", "exclusiveMinimum": 0},
                "min_same_top1": {"type": "number", "minimum": 0, "maximum": 1},
                "max_prompt_kl": {"type": "number", "exclusiveMinimum": 0},
                "min_exact_match": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
                "min_bleu": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
            },
        },
        "gen_tokens": {"type": "integer", "minimum": 0},
        "max_tokens": {"type": "integer", "minimum": 4},
        "baseline_topk": {"type": "integer", "minimum": 0},
        "null_control": {"type": "boolean"},
    },
}


def load_regress_config(path: Path) -> dict[str, Any]:
    """The checked contents of a regress.yaml (relative paths resolved from its folder)."""
    data = load_config(path, SCHEMA)
    base = path.parent
    if "prompts" in data:
        data["prompts"] = str((base / data["prompts"]).resolve())
    return data
