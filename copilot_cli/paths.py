"""Where the shipped data lives (no heavy imports: the CLI reads these for its defaults).

In a clone (or an editable install) that is the repository itself; an installed wheel carries
the same files, in the same layout, under copilot_cli/shipped/ (setup.py).
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
_PACKAGED = Path(__file__).resolve().parent / "shipped"
DATA_ROOT = _PACKAGED if (_PACKAGED / "sample_data").is_dir() else REPO_ROOT
SHIPPED_MODEL = DATA_ROOT / "sample_data" / "models" / "tiny-code-llama"
DEFAULT_PROMPTS = DATA_ROOT / "sample_data" / "prompts.jsonl"
SHIPPED_TEMPLATES = DATA_ROOT / "templates"
SAMPLE_REPO = DATA_ROOT / "sample_data" / "repo"
EXAMPLE_CONFIG = DATA_ROOT / "copilot-opt.yaml"
DEFAULT_CORPUS = (SAMPLE_REPO, SHIPPED_TEMPLATES)
