"""Editor requests for the served benches (bench_served_llamacpp.py, bench_served_vllm.py): the
sample repository chunked with SmolLM2's tokenizer, the shipped templates compiled for it, and
requests of ~2k tokens, each the code-completion template with K stored snippets (whole chunks
drawn at random from other files) and 60 lines before a cursor, composed the way the endpoint
composes them (serving/compose.py: each piece tokenized alone)."""

from __future__ import annotations

import random
import statistics
from pathlib import Path
from typing import Any

from common import emit

ROOT = Path(__file__).resolve().parents[1]
REPO = ROOT / "sample_data" / "repo"
TEMPLATE = "code-completion"
GEN = 32


def prepare(work: Path, tokenizer: Any) -> dict[str, Path]:
    """Chunks + registry of the sample repository and the bundle, for this tokenizer."""
    from copilot_cli.chunking import ChunkOptions, chunk_repository
    from copilot_cli.prompts import CompileOptions, compile_templates

    chunks, registry = work / "repo.jsonl", work / "repo.registry.json"
    chunk_repository(
        ChunkOptions(repos=(REPO,), out=chunks, registry=registry, use_cache=False, jobs=1),
        tokenizer,
    )
    compile_templates(CompileOptions(ROOT / "templates", work / "bundle"), tokenizer)
    return {"chunks": chunks, "registry": registry, "bundle": work / "bundle"}


def requests(paths: dict[str, Path], tokenizer: Any, count: int, snippets: int, seed: int = 0):
    """`count` composed requests (serving.compose.Composed), each with `snippets` whole
    chunks of other files than the one being edited."""
    from copilot_cli.chunking import read_chunks
    from copilot_cli.context import snippet_text
    from copilot_cli.core.tokens import prompt_ids
    from copilot_cli.kv import chunk_name
    from copilot_cli.prompts import load_bundle
    from copilot_cli.serving import context_pieces
    from copilot_cli.serving.compose import Composed

    bundle = load_bundle(paths["bundle"])
    records = [c for c in read_chunks(paths["chunks"]).chunks if c.language == "python"]
    files = sorted({c.first_path for c in records})
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        path = rng.choice(files)
        text = (REPO / path).read_text(encoding="utf-8", errors="replace")
        lines = text.splitlines(keepends=True)
        if len(lines) < 20:
            continue
        cut = rng.randrange(10, len(lines))
        before = "".join(lines[max(0, cut - 60) : cut])
        others = [c for c in records if c.first_path != path and c.token_count > 80]
        chosen = rng.sample(others, snippets)
        context = [{"path": c.first_path, "text": c.text.rstrip("\n")} for c in chosen]
        rendered = bundle.split(TEMPLATE, language="python", path=path, code_before=before,
                                code_after="", context=context)  # fmt: skip
        stored = {chunk_name(snippet_text(s["path"], s["text"], "xml")) for s in context}
        pieces, tail = context_pieces(tokenizer, rendered.rest, context, stored)
        prefix = prompt_ids(tokenizer, rendered.static_prefix)
        out.append(Composed(TEMPLATE, prefix, pieces, tail))
    return out


def kl_and_agreement(reference: Any, variant: Any, tokens: list[int]) -> tuple[float, float]:
    """Mean KL(reference || variant) over the rows and the share of rows whose argmax is the
    reference token."""
    import torch

    ref = torch.log_softmax(torch.as_tensor(reference, dtype=torch.float64), dim=-1)
    var = torch.log_softmax(torch.as_tensor(variant, dtype=torch.float64), dim=-1)
    kl = (ref.exp() * (ref - var)).sum(-1)
    agree = (var.argmax(-1) == torch.tensor(tokens)).double()
    return float(kl.mean()), float(agree.mean())


def fidelity_text(pairs: list[tuple[float, float]]) -> str:
    """ "mean KL …, greedy agreement …" of (KL, agreement) pairs."""
    kl = statistics.mean(k for k, _ in pairs)
    agree = statistics.mean(a for _, a in pairs)
    return f"mean KL {kl:.4f}, greedy agreement {agree:.1%}"


def emit_served(name: str, times: list[float], base: float, pairs, note: str) -> None:
    """One row of a served chunk-KV bench: median TTFT against the prefix-only median, passed
    when >= 2x with mean KL <= 0.05 and greedy agreement >= 90% (the served-request goals)."""
    kl = statistics.mean(k for k, _ in pairs)
    agree = statistics.mean(a for _, a in pairs)
    ours = statistics.median(times)
    emit(
        name,
        round(ours, 1),
        round(base, 1),
        "ms",
        goal=">= 2x; KL <= 0.05, agreement >= 90%",
        passed=base >= 2 * ours and kl <= 0.05 and agree >= 0.9,
        note=note,
    )
