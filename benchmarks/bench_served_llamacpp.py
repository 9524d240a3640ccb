"""An editor request served by llama.cpp with chunk KV (serving/llamacpp_context.py) vs the
static prefix only (what serve restored before), on SmolLM2-135M's GGUF: time to first token,
and fidelity against a full prefill (mean KL of the 32 next-token distributions of the full
prefill's own greedy continuation, read by teacher forcing, and greedy agreement). Requests:
the code-completion template, 5 stored snippets of the sample repository, 60 lines before a
cursor (~2k tokens; benchmarks/served_requests.py). Runs in .venv-llamacpp and needs
`make real-models`. Goals (the served-request issue): TTFT >= 2x the prefix-only TTFT; KL <=
0.05 and agreement >= 90%.
"""

# venv: .venv-llamacpp

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from served_requests import GEN, emit_served, fidelity_text, kl_and_agreement, prepare, requests

REQUESTS = 8
SNIPPETS = 5
SETTINGS = ((0, 0), (16, 128), (32, 256), (64, 512))  # (first, last) tokens recomputed


def main() -> None:
    from copilot_cli import instruments
    from copilot_cli.core.gguf import load_gguf_tokenizer
    from copilot_cli.kv import (
        chunk_slot_sources,
        llamacpp,  # the slot producer
    )
    from copilot_cli.serving.llamacpp_context import ContextEngine

    gguf = instruments.root() / instruments.SMOLLM2_GGUF
    if not gguf.is_file():
        print("skipped: make real-models first", file=sys.stderr)
        return
    tokenizer = load_gguf_tokenizer(gguf)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        paths = prepare(work, tokenizer)

        class Chunks:  # what chunk_slot_sources reads of PrefillOptions
            chunks, registry, top, snippet_format = paths["chunks"], None, None, "xml"

        sources = [
            llamacpp.SlotSource(n, t)
            for n, t in llamacpp.bundle_prefixes(paths["bundle"], ()).items()
        ]
        sources += chunk_slot_sources(llamacpp, gguf, paths["bundle"], Chunks)
        llamacpp.prefill_slots(sources, gguf, work / "slots")
        composed = requests(paths, tokenizer, REQUESTS, SNIPPETS)
        engine = ContextEngine(work / "slots", gguf)
        report(engine, composed)
        engine.close()


def report(engine, composed) -> None:
    sizes = [len(c.ids) for c in composed]
    placed = [sum(len(s.ids) for s in c.segments() if s.stored) for c in composed]
    fidelity = {setting: [] for setting in SETTINGS}
    prefix_only = []
    ttft = {"prefix": [], **{setting: [] for setting in SETTINGS}}
    for request in composed:
        reference = engine.generate(request, GEN, restore=False, place=False).tokens
        full = engine.score(request, reference, restore=False, place=False)
        prefix_only.append(
            kl_and_agreement(full, engine.score(request, reference, place=False), reference)
        )
        for setting in SETTINGS:
            engine.first_tokens, engine.last_tokens = setting
            rows = engine.score(request, reference)
            fidelity[setting].append(kl_and_agreement(full, rows, reference))
        for _ in range(2):  # interleaved, the second round counted
            ttft["prefix"].append(engine.generate(request, 1, place=False).prompt_ms)
            for setting in SETTINGS:
                engine.first_tokens, engine.last_tokens = setting
                ttft[setting].append(engine.generate(request, 1).prompt_ms)
    base = statistics.median(ttft["prefix"])
    note = (
        f"{len(composed)} requests of {min(sizes)}-{max(sizes)} tokens, {SNIPPETS} stored "
        f"snippets each ({statistics.mean(placed) / statistics.mean(sizes):.0%} of the prompt); "
        f"SmolLM2-135M Q4_1 GGUF; medians of TTFT; prefix-only KL "
        f"{statistics.mean(k for k, _ in prefix_only):.2e} (the batching floor)"
    )
    for setting in SETTINGS:
        emit_served(
            f"llama.cpp chunk KV (first {setting[0]} / last {setting[1]} tokens recomputed): "
            "TTFT vs static prefix only",
            ttft[setting],
            base,
            fidelity[setting],
            f"{fidelity_text(fidelity[setting])} over {GEN} tokens vs full prefill; {note}",
        )


if __name__ == "__main__":
    main()
