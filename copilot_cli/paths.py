"""Where the shipped data lives (no heavy imports: the CLI reads these for its defaults)."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SHIPPED_MODEL = REPO_ROOT / "sample_data" / "models" / "tiny-code-llama"
DEFAULT_PROMPTS = REPO_ROOT / "sample_data" / "prompts.jsonl"
DEFAULT_CORPUS = (REPO_ROOT / "sample_data" / "repo", REPO_ROOT / "templates")
