"""copilot-opt.yaml: one config for the whole pipeline, checked against a JSON Schema.

Every key, with its default, is documented in docs/build.md. Paths are relative to the folder
of the config file.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from copilot_cli.core.config_file import load_config
from copilot_cli.core.errors import InputError

DEFAULTS: dict[str, Any] = {
    "model": None,  # None = the shipped tiny code model
    "device": "cpu",
    "templates": "templates",
    "repositories": ["sample_data/repo"],
    "compile_templates": {"min_prefix_tokens": 64},
    "prefill_kv": {
        "enabled": True,
        "dtype": "float32",
        "block_size": 16,
        "chunk_size": 256,
        "verify": True,
    },
    "chunk": {"enabled": True, "max_tokens": 384, "reserve": 128, "include": [], "exclude": []},
    "quantize": {
        "enabled": True,
        "bits": 8,
        "group_size": 32,
        "keep_fp16": None,
        "keep_coverage": None,
        "corpus": None,
        "include_lm_head": False,
    },
    "prune": {"rate": 0.5, "method": "hybrid"},
    "regress": {
        "enabled": True,
        "prompts": "sample_data/prompts.jsonl",
        "variants": ["q8=quant={quant}", "cached=kv={kv}", "kv-int8=kv-dtype=int8"],
        "thresholds": {
            "max_mean_kl": 1.0e-3,
            "min_same_top1": 0.99,
            "max_prompt_kl": 1.0e-2,
            "min_exact_match": None,
            "min_bleu": None,
        },
        "gen_tokens": 16,
        "max_tokens": 256,
    },
}

_STR = {"type": "string"}
_BOOL = {"type": "boolean"}
_INT1 = {"type": "integer", "minimum": 1}


def _obj(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "properties": properties}


SCHEMA = _obj(
    {
        "model": {"type": ["string", "null"]},
        "device": _STR,
        "templates": _STR,
        "repositories": {"type": "array", "items": _STR},
        "compile_templates": _obj({"min_prefix_tokens": {"type": "integer", "minimum": 0}}),
        "prefill_kv": _obj(
            {
                "enabled": _BOOL,
                "dtype": {"enum": ["float32", "float16", "bfloat16"]},
                "block_size": _INT1,
                "chunk_size": _INT1,
                "verify": _BOOL,
            }
        ),
        "chunk": _obj(
            {
                "enabled": _BOOL,
                "max_tokens": _INT1,
                "reserve": {"type": "integer", "minimum": 0},
                "include": {"type": "array", "items": _STR},
                "exclude": {"type": "array", "items": _STR},
            }
        ),
        "quantize": _obj(
            {
                "enabled": _BOOL,
                "bits": {"enum": [8, 4]},
                "group_size": {"enum": [32, 64, 128]},
                "keep_fp16": {"type": ["integer", "null"], "minimum": 0},
                "keep_coverage": {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1},
                "corpus": {"type": ["array", "null"], "items": _STR},
                "include_lm_head": _BOOL,
            }
        ),
        "prune": _obj(
            {
                "rate": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                "method": {"enum": ["entropy", "attention", "hybrid", "ewma"]},
            }
        ),
        "regress": _obj(
            {
                "enabled": _BOOL,
                "prompts": _STR,
                "variants": {"type": "array", "items": _STR},
                "thresholds": _obj(
                    {
                        "max_mean_kl": {"type": "number", "exclusiveMinimum": 0},
                        "min_same_top1": {"type": "number", "minimum": 0, "maximum": 1},
                        "max_prompt_kl": {"type": "number", "exclusiveMinimum": 0},
                        "min_exact_match": {"type": ["number", "null"]},
                        "min_bleu": {"type": ["number", "null"]},
                    }
                ),
                "gen_tokens": {"type": "integer", "minimum": 0},
                "max_tokens": {"type": "integer", "minimum": 4},
            }
        ),
    }
)


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def load_build_config(path: Path) -> dict[str, Any]:
    """The config with defaults filled in and paths resolved against its folder."""
    data = _merge(DEFAULTS, load_config(path, SCHEMA))
    base = path.resolve().parent

    def resolve(value: str) -> str:
        return str((base / value).resolve())

    if data["model"] is not None and (base / data["model"]).exists():
        data["model"] = resolve(data["model"])
    data["templates"] = resolve(data["templates"])
    data["repositories"] = [resolve(r) for r in data["repositories"]]
    data["regress"]["prompts"] = resolve(data["regress"]["prompts"])
    if data["quantize"]["corpus"] is not None:
        data["quantize"]["corpus"] = [resolve(c) for c in data["quantize"]["corpus"]]
    for key, where in (
        (data["templates"], "templates"),
        (data["regress"]["prompts"], "regress.prompts"),
    ):
        if not Path(key).exists():
            raise InputError(f"{where}: {key} does not exist", where=str(path))
    for repo in data["repositories"]:
        if not Path(repo).is_dir():
            raise InputError(f"repositories: {repo} is not a folder", where=str(path))
    from copilot_cli.regress.gate import Thresholds

    try:
        Thresholds(**data["regress"]["thresholds"])
    except InputError as exc:
        raise InputError(
            f"regress.thresholds.{exc.where}: {exc.message}", where=str(path)
        ) from None
    if data["quantize"]["keep_fp16"] is not None and data["quantize"]["keep_coverage"] is not None:
        raise InputError(
            "quantize: keep_fp16 and keep_coverage exclude each other", where=str(path)
        )
    return data
