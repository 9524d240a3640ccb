"""Helpers every benchmark uses: timing by median of repeats, and the one-line JSON result."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable


def median_seconds(fn: Callable[[], object], repeat: int = 5, warmup: int = 1) -> float:
    """Median wall time of `fn` over `repeat` runs after `warmup` untimed runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def interleaved_seconds(
    ours: Callable[[], object], peer: Callable[[], object], rounds: int = 15, warmup: int = 1
) -> tuple[float, float]:
    """Median wall times of `ours` and `peer`, run alternately round by round, so that load
    from other tenants of a shared machine falls on both alike."""
    for _ in range(warmup):
        ours()
        peer()
    times_ours, times_peer = [], []
    for _ in range(rounds):
        for fn, times in ((ours, times_ours), (peer, times_peer)):
            started = time.perf_counter()
            fn()
            times.append(time.perf_counter() - started)
    return statistics.median(times_ours), statistics.median(times_peer)


def emit(
    name: str,
    ours: float,
    peer: float,
    unit: str,
    *,
    higher_is_better: bool = False,
    goal: str = "",
    passed: bool | None = None,
    **extra: object,
) -> dict:
    """Print one result line. `ratio` is how many times better ours is than the peer."""
    ratio = (ours / peer if higher_is_better else peer / ours) if ours and peer else 0.0
    result = {
        "name": name,
        "ours": round(ours, 6),
        "peer": round(peer, 6),
        "unit": unit,
        "ratio": round(ratio, 3),
    }
    if goal:
        result["goal"] = goal
    if passed is not None:
        result["pass"] = passed
    result.update(extra)
    print(json.dumps(result), flush=True)
    return result


def saved_llama(folder, max_positions: int = 2048):
    """A random-init Llama of about 30M parameters (8 layers, 512 wide, grouped-query
    attention) with the shipped tokenizer, saved to `folder` and loaded as the CLI would."""
    from pathlib import Path

    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from copilot_cli.core.models import SHIPPED_MODEL, ModelSpec, load_model

    folder = Path(folder)
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_MODEL)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=max_positions,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return load_model(ModelSpec(str(folder)))
